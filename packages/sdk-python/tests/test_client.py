"""Configuration and wire helpers, without a server."""

import inspect
import os
import unittest
from datetime import datetime, timezone
from unittest import mock

import den_sdk
from den_sdk import Client, DenConfigError, NetworkPolicy, Sandbox
from den_sdk._client import DEFAULT_API_URL, _query_string
from den_sdk.exec import command_body
from den_sdk.types import parse_time


class ConfigTest(unittest.TestCase):
    def test_env_and_arguments(self):
        with mock.patch.dict(os.environ, {"DEN_API_URL": "http://den.example:9000/", "DEN_API_KEY": "k1"}):
            c = Client()
            self.assertEqual(c.api_url, "http://den.example:9000")
            self.assertEqual(c._api_key, "k1")
            c = Client(api_url="https://other", api_key="k2")
            self.assertEqual((c.api_url, c._api_key), ("https://other", "k2"))
        with mock.patch.dict(os.environ, {"DEN_API_KEY": "k"}, clear=True):
            self.assertEqual(Client().api_url, DEFAULT_API_URL)
            self.assertEqual(DEFAULT_API_URL, "http://127.0.0.1:8787")

    def test_no_key_or_bad_url_fails_before_any_request(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(DenConfigError):
                Sandbox.create()
            with self.assertRaises(DenConfigError):
                Client(api_url="ftp://x", api_key="k")


class WireTest(unittest.TestCase):
    def test_command_bodies(self):
        self.assertEqual(command_body("ls"), {"cmd": "ls"})
        self.assertEqual(
            command_body(["python3", "-c", "print(1)"], cwd="/w", env={"A": "1"}, stdin="hi", timeout_seconds=5),
            {"argv": ["python3", "-c", "print(1)"], "cwd": "/w", "env": {"A": "1"}, "stdin_b64": "aGk=", "timeout_seconds": 5},
        )
        with self.assertRaises(TypeError):
            command_body(b"ls")  # type: ignore[arg-type]

    def test_query_strings(self):
        self.assertEqual(_query_string({"path": "/a b", "recursive": True, "x": None}), "path=%2Fa+b&recursive=true")
        self.assertEqual(_query_string([("metadata.task_id", "t-1"), ("limit", 1)]), "metadata.task_id=t-1&limit=1")

    def test_times(self):
        want = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
        self.assertEqual(parse_time("2025-01-02T03:04:05.678Z"), want)
        self.assertEqual(parse_time("2025-01-02T03:04:05.678000+00:00"), want)
        self.assertEqual(parse_time("2025-01-02T04:04:05.678+01:00"), want)
        self.assertEqual(parse_time("2025-01-02T03:04:05Z"), want.replace(microsecond=0))
        self.assertIsNone(parse_time(None))

    def test_network_policy(self):
        self.assertEqual(NetworkPolicy(egress="allowlist", allow=["pypi.org"]).to_wire(), {"egress": "allowlist", "allow": ["pypi.org"]})
        self.assertEqual(NetworkPolicy.from_wire({"egress": "open", "max_connections": 4}).max_connections, 4)


class DocstringTest(unittest.TestCase):
    def test_every_public_method_has_a_docstring_with_an_example(self):
        missing = []
        for name in den_sdk.__all__:
            obj = getattr(den_sdk, name)
            if not inspect.isclass(obj) or issubclass(obj, BaseException):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__enter__", "__exit__"):
                    continue
                fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if isinstance(fn, property):
                    fn = fn.fget
                if not callable(fn):
                    continue
                doc = inspect.getdoc(fn) or ""
                if "Example" not in doc:
                    missing.append(f"{name}.{attr}")
        self.assertEqual(missing, [], "public methods without an example in their docstring")


if __name__ == "__main__":
    unittest.main()
