"""Templates: the images sandboxes are created from (``/v1/templates``)."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Union

from ._client import Client, seg
from .types import Template, convert

__all__ = ["Templates"]

#: The server's default per setup command, for the socket timeout of a build.
_DEFAULT_SETUP_TIMEOUT = 600


class Templates:
    """The templates available to ``Sandbox.create(template=...)``: the server's own and the
    ones you built.

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

    @staticmethod
    def create(
        name: str,
        setup: Optional[Sequence[str]] = None,
        *,
        from_template: Optional[str] = None,
        from_checkpoint: Optional[str] = None,
        setup_timeout_seconds: Optional[int] = None,
        from_image: Optional[Union[str, Mapping[str, Any]]] = None,
        start_cmd: Optional[str] = None,
        ready_cmd: Optional[str] = None,
        ready_timeout_seconds: Optional[int] = None,
        vcpus: Optional[int] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        force: Optional[bool] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Template:
        """Builds a template: a sandbox from ``from_template`` (default ``base``) or from a
        checkpoint runs the ``setup`` commands in order (each must exit 0; no network), then
        its memory and disk are captured. Sandboxes created from it start in that state,
        processes included, as fast as from ``base``. The same recipe again returns the version
        built before. A failing command raises :class:`SetupFailedError` (its ``details`` have
        the command's ``stdout`` and ``stderr``). Returns when the build is done.

        ``from_image`` builds from an OCI image instead: a reference (``"python:3.12"``,
        ``"registry:5000/repo@sha256:..."``) or ``{"ref": ..., "credentials": {"username": ...,
        "password": ...}}``; its ENV, WORKDIR, USER and CMD become the template's defaults,
        ``start_cmd`` (default: the image's CMD) keeps running in every sandbox, and the
        build bakes once ``ready_cmd`` exits 0. A pull that fails raises :class:`ImageError`.

        Example::

            t = Templates.create("myproject", setup=[
                "mkdir -p /workspace/app && cd /workspace/app && git init -q",
                "echo 'print(42)' > /workspace/app/main.py",
            ])
            sbx = Sandbox.create(template=t.name)
        """
        body = {"name": name}
        if from_template is not None:
            body["from_template"] = from_template
        if from_checkpoint is not None:
            body["from_checkpoint"] = from_checkpoint
        if setup is not None:
            if isinstance(setup, str):
                raise TypeError("setup is a list of shell commands, not one string")
            body["setup"] = list(setup)  # type: ignore[assignment]
        if setup_timeout_seconds is not None:
            body["setup_timeout_seconds"] = setup_timeout_seconds  # type: ignore[assignment]
        optional = {
            "from_image": from_image, "start_cmd": start_cmd, "ready_cmd": ready_cmd,
            "ready_timeout_seconds": ready_timeout_seconds, "vcpus": vcpus, "memory_mb": memory_mb,
            "disk_mb": disk_mb, "force": force,
        }
        body.update({k: v for k, v in optional.items() if v is not None})  # type: ignore[arg-type]
        client = Client(api_url, api_key)
        # The answer comes when the build is done: wait on the socket longer than it may take.
        per = setup_timeout_seconds or _DEFAULT_SETUP_TIMEOUT
        timeout = max(client.timeout, per * max(1, len(setup or ())) + 300, 3600 if from_image is not None else 0)
        return convert(client.json("POST", "/v1/templates", json_body=body, timeout=timeout), Template.from_wire)

    @staticmethod
    def delete(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a template you built (all its versions); sandboxes and checkpoints made from
        it keep working.

        Example::

            Templates.delete("myproject")
        """
        Client(api_url, api_key).empty("DELETE", f"/v1/templates/{seg(name)}")
