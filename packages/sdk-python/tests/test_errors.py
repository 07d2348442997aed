"""The error mapping, without a server: every code of the protocol's ERROR_STATUS maps to a
typed class, and error bodies and stream error lines become the right exceptions."""

import json
import os
import pickle
import re
import unittest
from pathlib import Path

import den_sdk
from den_sdk import errors as E
from den_sdk.exec import _stream_error

TS_ERRORS = Path(__file__).resolve().parents[2] / "protocol" / "src" / "errors.ts"


def protocol_error_status():
    """ERROR_STATUS of the TypeScript protocol: from the JSON the Node test writes (generated
    from the compiled @den/protocol), else parsed from packages/protocol/src/errors.ts."""
    path = os.environ.get("DEN_ERROR_STATUS_JSON")
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f), "json"
    if TS_ERRORS.exists():
        src = TS_ERRORS.read_text(encoding="utf-8")
        block = re.search(r"export const ERROR_STATUS = \{(.*?)\}", src, re.S)
        if not block:
            raise AssertionError("ERROR_STATUS not found in errors.ts")
        return {k: int(v) for k, v in re.findall(r"^\s*([a-z_]+):\s*(\d+),?\s*$", block.group(1), re.M)}, "ts"
    return None, None


class ErrorMappingTest(unittest.TestCase):
    def test_every_protocol_code_maps_to_a_typed_class(self):
        codes, source = protocol_error_status()
        if codes is None:
            self.skipTest("neither DEN_ERROR_STATUS_JSON nor packages/protocol/src/errors.ts is available")
        self.assertGreater(len(codes), 30, f"too few codes read from {source}")
        for code, status in codes.items():
            with self.subTest(code=code):
                cls = E.ERROR_CLASSES.get(code)
                self.assertIsNotNone(cls, f"{code} has no class")
                self.assertTrue(issubclass(cls, E.DenError))
                self.assertIsNot(cls, E.DenError, f"{code} maps to the bare DenError")
                self.assertEqual(E.ERROR_STATUS.get(code), status, f"{code}: status differs from the protocol's")
                e = E.api_error(code, "m")
                self.assertIsInstance(e, cls)
                self.assertEqual((e.code, e.status, e.message), (code, status, "m"))
        self.assertEqual(set(E.ERROR_STATUS), set(codes), "den_sdk.ERROR_STATUS is out of date with the protocol")

    def test_the_families(self):
        expect = {
            "sandbox_not_found": E.SandboxNotFoundError,
            "unauthorized": E.AuthenticationError,
            "invalid_argument": E.InvalidArgumentError,
            "quota_exceeded": E.QuotaExceededError,
            "capacity_exhausted": E.CapacityError,
            "invalid_state": E.InvalidStateError,
            "sandbox_destroyed": E.InvalidStateError,
            "exec_timeout": E.DenTimeoutError,
            "timeout": E.DenTimeoutError,
            "connection_refused": E.DenConnectionRefusedError,
            "file_not_found": E.DenFileNotFoundError,
            "snapshot_not_found": E.CheckpointNotFoundError,
            "template_not_found": E.TemplateNotFoundError,
            "proc_not_found": E.ProcessNotFoundError,
            "forbidden": E.PermissionDeniedError,
            "setup_failed": E.SetupFailedError,
            "volume_not_found": E.VolumeNotFoundError,
            "volume_in_use": E.VolumeInUseError,
            "already_exists": E.ConflictError,
        }
        for code, cls in expect.items():
            with self.subTest(code=code):
                self.assertIs(E.error_class_for(code), cls)
        # Subclass relations callers rely on.
        self.assertTrue(issubclass(E.SandboxNotFoundError, E.NotFoundError))
        self.assertTrue(issubclass(E.CapacityError, E.UnavailableError))
        self.assertTrue(issubclass(E.VolumeNotFoundError, E.NotFoundError))
        self.assertTrue(issubclass(E.VolumeInUseError, E.ConflictError))
        self.assertTrue(issubclass(E.DenTimeoutError, TimeoutError))
        self.assertTrue(issubclass(E.DenConnectionRefusedError, ConnectionRefusedError))
        self.assertTrue(issubclass(E.DenFileNotFoundError, FileNotFoundError))
        self.assertIs(E.UnauthorizedError, E.AuthenticationError)
        self.assertIs(E.error_class_for("some_future_code"), E.DenError)

    def test_error_bodies(self):
        e = E.error_from_response(404, b'{"error":{"code":"sandbox_not_found","message":"sandbox \\"x\\" does not exist"}}')
        self.assertIsInstance(e, E.SandboxNotFoundError)
        self.assertEqual((e.status, e.code, e.message), (404, "sandbox_not_found", 'sandbox "x" does not exist'))
        self.assertIn("sandbox_not_found", str(e))
        q = E.error_from_response(429, b'{"error":{"code":"quota_exceeded","message":"too many","details":{"limit":20}}}')
        self.assertIsInstance(q, E.QuotaExceededError)
        self.assertEqual(q.details, {"limit": 20})
        html = E.error_from_response(502, b"<html>Bad Gateway</html>", "Bad Gateway")
        self.assertIs(type(html), E.DenError)
        self.assertEqual(html.code, "http_502")
        self.assertIn("Bad Gateway", html.message)
        self.assertEqual(E.error_from_response(500, b"").code, "http_500")

    def test_stream_error_lines_get_the_codes_status(self):
        e = _stream_error({"code": "exec_timeout", "message": "too slow"})
        self.assertIsInstance(e, E.DenTimeoutError)
        self.assertEqual(e.status, 408)
        self.assertEqual(_stream_error({"code": "weird", "message": "x"}).status, 500)

    def test_errors_pickle_and_catch_as_builtins(self):
        e = E.api_error("file_not_found", "/nope")
        back = pickle.loads(pickle.dumps(e))
        self.assertIsInstance(back, E.DenFileNotFoundError)
        self.assertEqual((back.code, back.message, back.status), ("file_not_found", "/nope", 404))
        with self.assertRaises(FileNotFoundError):
            raise e
        with self.assertRaises(TimeoutError):
            raise E.api_error("timeout", "t")

    def test_everything_is_exported(self):
        for name in den_sdk.__all__:
            self.assertTrue(hasattr(den_sdk, name), name)
        for cls in set(E.ERROR_CLASSES.values()):
            self.assertIn(cls.__name__, den_sdk.__all__)


if __name__ == "__main__":
    unittest.main()
