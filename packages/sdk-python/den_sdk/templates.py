"""Templates: the images sandboxes are created from (``/v1/templates``), and their builds."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import tempfile
from typing import IO, Any, Dict, Generator, List, Literal, Mapping, Optional, Sequence, Union, overload

from ._client import Client, seg
from .errors import InvalidArgumentError
from .types import BuildContext, Template, TemplateBuild, TemplateBuildLogLine, convert

__all__ = ["Templates"]

#: The server's default per setup command, for the socket timeout of a build.
_DEFAULT_SETUP_TIMEOUT = 600
#: Bytes read at a time when hashing or streaming a context.
_CHUNK = 1024 * 1024
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

#: What :meth:`Templates.upload_context` takes: bytes, a path (a tar file or a directory to tar),
#: or a binary file object.
ContextData = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", IO[bytes]]


def _spec_body(
    name: str,
    setup: Optional[Sequence[str]],
    from_template: Optional[str],
    from_checkpoint: Optional[str],
    setup_timeout_seconds: Optional[int],
    from_image: Optional[Union[str, Mapping[str, Any]]],
    from_archive: Optional[str],
    dockerfile: Optional[str],
    context: Optional[str],
    build_args: Optional[Mapping[str, str]],
    start_cmd: Optional[str],
    ready_cmd: Optional[str],
    ready_timeout_seconds: Optional[int],
    vcpus: Optional[int],
    memory_mb: Optional[int],
    disk_mb: Optional[int],
    force: Optional[bool],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"name": name}
    if setup is not None:
        if isinstance(setup, str):
            raise TypeError("setup is a list of shell commands, not one string")
        body["setup"] = list(setup)
    if build_args is not None:
        if not isinstance(build_args, Mapping):
            raise TypeError("build_args is a mapping of ARG names to values")
        build_args = dict(build_args)
    optional = {
        "from_template": from_template, "from_checkpoint": from_checkpoint, "setup_timeout_seconds": setup_timeout_seconds,
        "from_image": from_image, "from_archive": from_archive, "dockerfile": dockerfile, "context": context, "build_args": build_args,
        "start_cmd": start_cmd, "ready_cmd": ready_cmd, "ready_timeout_seconds": ready_timeout_seconds,
        "vcpus": vcpus, "memory_mb": memory_mb, "disk_mb": disk_mb, "force": force,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _hash_file(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return "sha256:" + h.hexdigest()
        h.update(chunk)


def _tar_dir(path: str, out: IO[bytes]) -> None:
    """The directory's contents at the archive's root (``./...``), as ``tar -C path -cf - .``."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(path, arcname=".")


class Templates:
    """The templates available to ``Sandbox.create(template=...)``: the server's own and the
    ones you built, and the builds that make them.

    Example::

        for t in Templates.list():
            print(f"{t.name}@{t.version}", "(current)" if t.current else "")
    """

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Template]:
        """Every template version on the server that this key may use.

        Example::

            names = sorted({t.name for t in Templates.list()})
        """
        w = Client(api_url, api_key).json("GET", "/v1/templates")
        return convert(w, lambda v: [Template.from_wire(t) for t in v["templates"]])

    @overload
    @staticmethod
    def create(name: str, setup: Optional[Sequence[str]] = ..., *, wait: Literal[False], **kwargs: Any) -> TemplateBuild: ...

    @overload
    @staticmethod
    def create(name: str, setup: Optional[Sequence[str]] = ..., *, wait: Optional[Literal[True]] = ..., **kwargs: Any) -> Template: ...

    @staticmethod
    def create(
        name: str,
        setup: Optional[Sequence[str]] = None,
        *,
        from_template: Optional[str] = None,
        from_checkpoint: Optional[str] = None,
        setup_timeout_seconds: Optional[int] = None,
        from_image: Optional[Union[str, Mapping[str, Any]]] = None,
        from_archive: Optional[str] = None,
        dockerfile: Optional[str] = None,
        context: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        start_cmd: Optional[str] = None,
        ready_cmd: Optional[str] = None,
        ready_timeout_seconds: Optional[int] = None,
        vcpus: Optional[int] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        force: Optional[bool] = None,
        wait: Optional[bool] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Union[Template, TemplateBuild]:
        """Builds a template: a sandbox from ``from_template`` (default ``base``) or from a
        checkpoint runs the ``setup`` commands in order (each must exit 0; no network), then
        its memory and disk are captured. Sandboxes created from it start in that state,
        processes included, as fast as from ``base``. The same recipe again returns the version
        built before. A failing command raises :class:`SetupFailedError` (its ``details`` have
        the command's ``stdout`` and ``stderr``). Returns when the build is done.

        ``from_image`` builds from an OCI image instead: a reference (``"python:3.12"``,
        ``"registry:5000/repo@sha256:..."``) or ``{"ref": ..., "credentials": {"username": ...,
        "password": ...}}`` (or ``{"token": ...}``); its ENV, WORKDIR, USER and CMD become the
        template's defaults, ``start_cmd`` (default: the image's CMD) keeps running in every
        sandbox, and the build bakes once ``ready_cmd`` exits 0. A pull that fails raises
        :class:`ImageError`. ``from_archive`` builds from an image archive (an OCI layout or
        ``docker save`` tar) instead: the ``sha256:...`` :meth:`upload_context` answered for it.

        ``dockerfile`` (the Dockerfile's text) builds from a Dockerfile: its FROM names an image
        or a template, each RUN runs in a build microVM and is cached; COPY takes files from
        ``context``, the ``sha256:...`` of a tar uploaded with :meth:`upload_context`;
        ``build_args`` gives the ARGs values. A bad instruction is an
        :class:`InvalidArgumentError` naming its line; a failing RUN a :class:`SetupFailedError`.

        ``wait=False`` answers at once with the :class:`TemplateBuild` (as :meth:`start_build`
        does); follow it with :meth:`build_logs` and :meth:`build`.

        Example::

            t = Templates.create("myproject", setup=[
                "mkdir -p /workspace/app && cd /workspace/app && git init -q",
                "echo 'print(42)' > /workspace/app/main.py",
            ])
            sbx = Sandbox.create(template=t.name)
        """
        body = _spec_body(
            name, setup, from_template, from_checkpoint, setup_timeout_seconds, from_image, from_archive, dockerfile, context, build_args,
            start_cmd, ready_cmd, ready_timeout_seconds, vcpus, memory_mb, disk_mb, force,
        )
        client = Client(api_url, api_key)
        if wait is False:
            body["wait"] = False
            return convert(client.json("POST", "/v1/templates", json_body=body), lambda w: TemplateBuild.from_wire(w["build"]))
        # The answer comes when the build is done: wait on the socket longer than it may take.
        per = setup_timeout_seconds or _DEFAULT_SETUP_TIMEOUT
        long_build = from_image is not None or from_archive is not None or dockerfile is not None
        timeout = max(client.timeout, per * max(1, len(setup or ())) + 300, 3600 if long_build else 0)
        return convert(client.json("POST", "/v1/templates", json_body=body, timeout=timeout), Template.from_wire)

    @staticmethod
    def start_build(name: str, setup: Optional[Sequence[str]] = None, **kwargs: Any) -> TemplateBuild:
        """Starts a build (the arguments of :meth:`create`) and answers at once with it
        (``state == "building"``). Follow it with :meth:`build_logs` (``follow=True`` ends when
        the build does), then read how it ended with :meth:`build`. Refusals that need no
        build (a bad argument, a Dockerfile line, :class:`QuotaExceededError` for too many
        builds at once) raise here.

        Example::

            b = Templates.start_build("web", from_image="nginx:1.27", ready_cmd="curl -fs localhost")
            for line in Templates.build_logs(b.id, follow=True):
                print(line.message)
            b = Templates.build(b.id)
            print(f"{b.name}@{b.version}" if b.state == "ready" else b.error)
        """
        if "wait" in kwargs:
            raise TypeError("start_build always answers at once; use create to wait")
        return Templates.create(name, setup, wait=False, **kwargs)  # type: ignore[no-any-return]

    @staticmethod
    def upload_context(
        data: ContextData, *, digest: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> BuildContext:
        """Uploads a build context: a tar (optionally gzipped) of the files a Dockerfile's COPY
        takes. ``data`` is the tar's bytes, the path of a tar file, the path of a directory (its
        contents are tarred, as ``tar -C DIR -cf - .``), or a binary file object. The SDK
        computes the sha256 itself (a file is read twice, never held in memory; give
        ``digest="sha256:..."`` to skip that); the server checks it. Returns the
        :class:`BuildContext` whose ``context`` a build names.

        Example::

            ctx = Templates.upload_context("./app")
            with open("./app/Dockerfile") as f:
                t = Templates.create("app", dockerfile=f.read(), context=ctx.context)
        """
        if digest is not None and not _DIGEST.match(digest):
            raise InvalidArgumentError("invalid_argument", f"a context digest is sha256:<64 hex digits>, got {digest!r}", 400)
        client = Client(api_url, api_key)

        def put(d: str, body: Any) -> BuildContext:
            w = client.json("PUT", f"/v1/templates/contexts/{d}", body=body)
            return convert(w, BuildContext.from_wire)

        if isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
            return put(digest or "sha256:" + hashlib.sha256(raw).hexdigest(), raw)
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            if os.path.isdir(path):
                with tempfile.TemporaryFile() as tmp:
                    _tar_dir(path, tmp)
                    tmp.seek(0)
                    d = _hash_file(tmp)
                    tmp.seek(0)
                    return put(d, tmp)
            with open(path, "rb") as f:
                d = digest or _hash_file(f)
                f.seek(0)
                return put(d, f)
        if hasattr(data, "read"):
            if isinstance(data, io.TextIOBase):
                raise TypeError("a context is read in binary mode (open(path, 'rb'))")
            if digest is not None:
                return put(digest, data)
            if data.seekable():
                start = data.tell()
                d = _hash_file(data)
                data.seek(start)
                return put(d, data)
            raw = data.read()
            return put("sha256:" + hashlib.sha256(raw).hexdigest(), raw)
        raise TypeError("a context is bytes, a path (a tar file or a directory) or a binary file object")

    @staticmethod
    def build(build_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """One build of yours (an admin key sees every build); :class:`NotFoundError` for an id
        there is none of.

        Example::

            b = Templates.build("op_...")
            print(b.state, b.version, b.error)
        """
        w = Client(api_url, api_key).json("GET", f"/v1/templates/builds/{seg(build_id)}")
        return convert(w, TemplateBuild.from_wire)

    @staticmethod
    def builds(
        name: Optional[str] = None, *, limit: Optional[int] = None, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> List[TemplateBuild]:
        """Your builds, newest first: of the template ``name`` if given; at most ``limit``
        (1 to 200; default 50). Builds that ended are kept for a while, then pruned.

        Example::

            for b in Templates.builds("web", limit=5):
                print(b.id, b.state, b.version)
        """
        w = Client(api_url, api_key).json("GET", "/v1/templates/builds", query={"name": name, "limit": limit})
        return convert(w, lambda v: [TemplateBuild.from_wire(b) for b in v["builds"]])

    @staticmethod
    def cancel_build(build_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """Cancels a running build: its host stops it and it ends ``cancelled`` (error
        ``aborted``). Returns the build as it stands (one that already ended is left as it is).

        Example::

            Templates.cancel_build(b.id)
        """
        w = Client(api_url, api_key).json("POST", f"/v1/templates/builds/{seg(build_id)}/cancel")
        return convert(w, TemplateBuild.from_wire)

    @staticmethod
    def build_logs(
        build_id: str, offset: int = 0, follow: bool = False, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> Generator[TemplateBuildLogLine, None, None]:
        """A build's log lines from ``offset`` (a line's ``seq``; 0: the first): without
        ``follow``, those written so far; with ``follow=True``, those and then new ones as they
        come, until the build ends (keepalive lines are skipped). The request is made here,
        so an unknown build raises before the first line. Closing the generator hangs up.

        Example::

            for line in Templates.build_logs(b.id, follow=True):
                print(("ERROR " if line.level == "error" else "") + line.message)
        """
        client = Client(api_url, api_key)
        lines = client.ndjson(
            "GET", f"/v1/templates/builds/{seg(build_id)}/logs",
            query={"offset": offset or None, "follow": True if follow else None}, accept="application/x-ndjson",
        )

        def gen() -> Generator[TemplateBuildLogLine, None, None]:
            try:
                for line in lines:
                    yield convert(line, TemplateBuildLogLine.from_wire)
            finally:
                lines.close()

        return gen()

    @staticmethod
    def delete(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a template you built (all its versions); sandboxes and checkpoints made from
        it keep working.

        Example::

            Templates.delete("myproject")
        """
        Client(api_url, api_key).empty("DELETE", f"/v1/templates/{seg(name)}")
