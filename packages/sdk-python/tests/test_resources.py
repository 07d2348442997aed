"""The module-level resources of the blocking client against a real server: templates (a
build, a sandbox from it, a failed build), API keys (create, use, revoke), usage, hosts and
webhooks (one at an address no test listens on, subscribed to an event these tests never
cause, so nothing is ever sent to it)."""

import unittest
from datetime import datetime, timedelta, timezone

from den_sdk import (
    AuthenticationError,
    HostInfo,
    InvalidArgumentError,
    Keys,
    NotFoundError,
    PermissionDeniedError,
    Sandbox,
    SetupFailedError,
    Template,
    TemplateBuild,
    Templates,
    Usage,
    UsageGroup,
    Webhook,
    Webhooks,
    Hosts,
)

from ._support import RUN_TAG, require_server

#: TEST-NET-2 (RFC 5737): public to the server's guard, and no one's.
WEBHOOK_URL = "http://198.51.100.7:9/hook"
#: An event no test here causes: the webhook never gets a delivery.
QUIET_EVENT = "sandbox.recovered"


def create_webhook(test, create):
    """Creates the test's webhook, failing clearly if the server has no webhook routes."""
    try:
        return create(WEBHOOK_URL, events=[QUIET_EVENT], description=f"python sdk {RUN_TAG}")
    except NotFoundError as e:
        if e.code == "route_not_found":
            test.fail(f"the server has no webhook routes: POST /v1/webhooks answered 404 route_not_found ({e.message})")
        raise


@require_server
class ResourcesTest(unittest.TestCase):
    def test_templates_list_build_use_delete(self):
        templates = Templates.list()
        self.assertTrue(all(isinstance(t, Template) for t in templates))
        base = [t for t in templates if t.name == "base" and t.current]
        self.assertEqual(len(base), 1, templates)
        self.assertIsNone(base[0].owner)

        name = f"{RUN_TAG}-tpl"
        t = Templates.create(name, setup=["mkdir -p /workspace/p && echo from-setup > /workspace/p/readme"])
        try:
            self.assertEqual((t.name, t.current), (name, True))
            self.assertIsNotNone(t.owner)
            self.assertIn((name, t.version), [(x.name, x.version) for x in Templates.list()])
            with Sandbox.create(template=name, ttl_seconds=300, metadata={"suite": RUN_TAG}) as sbx:
                self.assertEqual(sbx.info.template, name)
                self.assertEqual(sbx.exec("cat /workspace/p/readme").stdout, "from-setup\n")
        finally:
            Templates.delete(name)
        self.assertNotIn(name, [x.name for x in Templates.list()])
        with self.assertRaises(SetupFailedError) as cm:
            Templates.create(f"{RUN_TAG}-broken", setup=["echo nope >&2; false"])
        self.assertEqual((cm.exception.status, cm.exception.details.get("stderr")), (422, "nope\n"))
        with self.assertRaises(NotFoundError):
            Templates.delete(f"{RUN_TAG}-never-built")

    def test_template_build_started_followed_listed(self):
        name = f"{RUN_TAG}-bld"
        b = Templates.start_build(name, setup=["echo one > /etc/one", "echo two"])
        self.assertIsInstance(b, TemplateBuild)
        self.assertEqual(b.name, name)
        try:
            lines = list(Templates.build_logs(b.id, follow=True))
            self.assertEqual([x.seq for x in lines], list(range(len(lines))))
            self.assertIn("setup: echo one > /etc/one", [x.message for x in lines])
            done = Templates.build(b.id)
            self.assertEqual((done.state, done.error, done.done), ("ready", None, True))
            self.assertIn((name, done.version), [(t.name, t.version) for t in Templates.list()])
            self.assertEqual([x.id for x in Templates.builds(name)], [b.id])
            self.assertEqual([x.message for x in Templates.build_logs(b.id, offset=1)], [x.message for x in lines[1:]])
            self.assertEqual(Templates.cancel_build(b.id).state, "ready", "a build that ended is left as it is")
        finally:
            Templates.delete(name)
        failed = Templates.start_build(f"{RUN_TAG}-bld-broken", setup=["echo nope >&2; false"])
        for _ in Templates.build_logs(failed.id, follow=True):
            pass
        failed = Templates.build(failed.id)
        self.assertEqual((failed.state, failed.error["code"]), ("error", "setup_failed"))

    def test_keys_create_use_revoke(self):
        owner = f"{RUN_TAG}-owner"
        k = Keys.create(owner=owner)
        self.assertTrue(k.key)
        self.assertEqual((k.owner, k.admin, k.revoked_at), (owner, False, None))
        listed = [x for x in Keys.list() if x.id == k.id]
        self.assertEqual(len(listed), 1)
        self.assertIsNone(listed[0].key)  # never shown again
        self.assertEqual(list(Sandbox.list(api_key=k.key)), [])  # a new owner: sees none of admin's
        with self.assertRaises(PermissionDeniedError) as cm:  # not an admin key
            Keys.list(api_key=k.key)
        self.assertEqual(cm.exception.status, 403)
        revoked = Keys.revoke(k.id)
        self.assertIsNotNone(revoked.revoked_at)
        with self.assertRaises(AuthenticationError):
            list(Sandbox.list(api_key=k.key))
        with self.assertRaises(NotFoundError):
            Keys.revoke("key_does_not_exist")
        # format="e2b": the e2b_<hex> form the e2b Python client insists on, a key like any other.
        e = Keys.create(owner=owner, format="e2b")
        self.assertRegex(e.key, r"^e2b_[0-9a-f]{48}$")
        self.assertEqual(list(Sandbox.list(api_key=e.key)), [])
        Keys.revoke(e.id)

    def test_usage_and_hosts(self):
        r = Usage.get()
        self.assertEqual(r.group_by, "sandbox")
        self.assertLess(r.from_, r.to)
        self.assertTrue(all(isinstance(g, UsageGroup) for g in r.groups))
        self.assertTrue(any(g.running_seconds > 0 and g.vcpu_seconds > 0 for g in r.groups), r.groups[:3])
        now = datetime.now(timezone.utc)
        hour = Usage.get(from_=now - timedelta(hours=1), to=now, group_by="owner")
        self.assertEqual(hour.group_by, "owner")
        self.assertLess(abs((hour.to - now).total_seconds()), 2)
        with self.assertRaises(InvalidArgumentError):
            Usage.get(group_by="nonsense")

        hosts = Hosts.list()
        self.assertGreaterEqual(len(hosts), 1)
        self.assertTrue(all(isinstance(h, HostInfo) for h in hosts))
        self.assertIn("up", [h.status for h in hosts])
        up = next(h for h in hosts if h.status == "up")
        self.assertIsNotNone(up.capacity)
        self.assertGreater(up.capacity.memory_mb, 0)

    def test_webhooks_create_list_deliveries_delete(self):
        hook = create_webhook(self, Webhooks.create)
        try:
            self.assertIsInstance(hook, Webhook)
            self.assertTrue(hook.id.startswith("wh_"), hook.id)
            self.assertTrue(hook.secret and hook.secret.startswith("whsec_"))
            self.assertEqual((hook.url, hook.events, hook.description), (WEBHOOK_URL, [QUIET_EVENT], f"python sdk {RUN_TAG}"))
            listed = [h for h in Webhooks.list() if h.id == hook.id]
            self.assertEqual(len(listed), 1)
            self.assertIsNone(listed[0].secret)  # shown once
            self.assertEqual(Webhooks.get(hook.id).url, WEBHOOK_URL)
            page = Webhooks.deliveries(hook.id)
            self.assertEqual((page.deliveries, page.next_cursor), ([], None))
            self.assertEqual(len(Webhooks.deliveries(hook.id, status="failed", limit=5)), 0)
            self.assertEqual(list(Webhooks.all_deliveries(hook.id, page_size=10)), [])
            with self.assertRaises(NotFoundError):
                Webhooks.redeliver(hook.id, "whd_aaaaaaaaaaaaaaaa")
        finally:
            Webhooks.delete(hook.id)
        with self.assertRaises(NotFoundError):
            Webhooks.get(hook.id)
        with self.assertRaises(InvalidArgumentError) as cm:  # the server refuses loopback addresses
            Webhooks.create("http://127.0.0.1:9/hook")
        self.assertIn("127.0.0.1", cm.exception.message)
        with self.assertRaises(InvalidArgumentError):
            Webhooks.create(WEBHOOK_URL, events=["no.such.event"])


if __name__ == "__main__":
    unittest.main()
