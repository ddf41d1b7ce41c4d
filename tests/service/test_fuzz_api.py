"""Issue 20 "done means": every API route fuzzed with schemathesis, beyond the positive conformance run of
test_schemathesis.py: negative data (values the schema forbids) on every operation, and stateful sequences that
follow the OpenAPI links (upload -> get, submit -> status/log/cancel, list -> get/revoke), all with an admin token.
Never a 5xx; every error is the documented JSON error. Bounded (derandomized, a few examples each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("schemathesis", reason="schemathesis is not installed (the 'dev' extra)")

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

NEGATIVE_EXAMPLES = 8
STATEFUL_EXAMPLES = 6
STATEFUL_STEPS = 6


def _schema(app: Any) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app).include(path_regex="^/api/v1/")


def _error_shape(response: Any) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert {"message", "field", "code"} <= set(error) and error["message"]


def test_every_operation_refuses_negative_data_cleanly(
    service_app: Any, headers_for: Callable[[str], dict[str, str]]
) -> None:
    admin = headers_for("admin")
    operations = [r.ok() for r in _schema(service_app).get_all_operations()]
    operations = [
        op
        for op in operations
        if not op.path.endswith("/revoke")  # the admin token stays
        and (len(op.body) or len(op.query))
    ]  # a free-text path parameter cannot be invalid
    assert len(operations) >= 8
    statuses: dict[str, set[int]] = {}
    without: list[str] = []

    for operation in operations:
        check = _negative_check(
            operation, admin, statuses.setdefault(f"{operation.method.upper()} {operation.path}", set())
        )
        try:
            check()
        except Unsatisfiable:  # nothing it takes can be invalid (e.g. GET /health: no parameters, no body)
            without.append(operation.path)
    assert len(without) <= 2, without
    refused = {name for name, codes in statuses.items() if codes and max(codes) >= 400}
    assert len(refused) >= len(statuses) // 2, statuses  # most operations saw their bad data refused


def _negative_check(operation: Any, admin: dict[str, str], seen: set[int]) -> Callable[[], None]:
    @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    @settings(
        max_examples=NEGATIVE_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(headers={**admin, **(case.headers or {})})
        case.validate_response(response, checks=[not_a_server_error])
        _error_shape(response)
        seen.add(response.status_code)

    return check  # type: ignore[no-any-return]


def test_stateful_sequences_follow_the_links(service_app: Any, headers_for: Callable[[str], dict[str, str]]) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    admin = headers_for("admin")
    machine = _schema(service_app).as_state_machine()
    rules = [
        name for name in dir(machine) if name.startswith(("POST_api_v1_manifests___201", "POST_api_v1_jobs___202"))
    ]
    assert len(rules) >= 5, rules  # upload -> get, raw; submit -> status, log, cancel
    calls: list[int] = []

    class Workflow(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": admin}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            _error_shape(response)
            calls.append(response.status_code)

    run_state_machine_as_test(
        Workflow,
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            derandomize=True,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert len(calls) >= STATEFUL_EXAMPLES
