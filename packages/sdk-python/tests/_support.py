"""Shared helpers of the test suite. The integration tests need a running Den server:
``DEN_API_URL`` and ``DEN_API_KEY`` (the Node test ``packages/server/test/python-sdk.test.ts``
starts one and sets both); without ``DEN_API_KEY`` they are skipped."""

import os
import unittest
import uuid

#: A tag in every sandbox's metadata this run creates, so lists can be scoped to this run.
RUN_TAG = "py-" + uuid.uuid4().hex[:10]


def require_server(test_case_cls):
    """Skips a TestCase class when no server is configured."""
    if not os.environ.get("DEN_API_KEY"):
        return unittest.skip("DEN_API_KEY is not set: no Den server to test against")(test_case_cls)
    return test_case_cls
