"""Security follow-up (SR2), artifacts: listing an object's artifacts builds none of them (a viewer reloading the
listing costs the server no report, CSV or trace rendering: each size shows once the artifact was built), and a
deleted run's built artifacts are forgotten through :func:`repliscope.service.web.artifacts.forget`, the call the
annotations router makes, never by reaching into the module's cache."""

from __future__ import annotations

from types import SimpleNamespace

from repliscope.service.web import artifacts

NAMES = ("report.html", "report.md", "samples.csv", "samples.json", "record.json", "trace.json", "trace.otlp.json")


def _target(object_id: str, calls: list[str], what: str = "run") -> artifacts.Target:
    def builder(name: str) -> artifacts.Builder:
        def build() -> bytes:
            calls.append(name)
            return name.encode() * 100

        return build

    return artifacts.Target(what, object_id, "/p", "/p/artifacts", {n: builder(n) for n in NAMES})


def test_listing_a_runs_artifacts_builds_none_of_them_however_often_it_is_viewed() -> None:
    calls: list[str] = []
    target = _target("sr2-listing-0001", calls)
    for _ in range(20):  # a viewer reloading the page
        listed = artifacts.listing(target, admin=False)
        assert [a.name for a in listed] == list(NAMES)
        assert {a.size_text for a in listed} == {"made when opened"}
    assert calls == []
    artifacts.built(target, "report.html", admin=False)  # opened once: built once, then listed with its size
    assert calls == ["report.html"]
    sizes = {a.name: a.size for a in artifacts.listing(target, admin=False)}
    assert sizes == {n: (len(b"report.html") * 100 if n == "report.html" else None) for n in NAMES}
    assert {a.size for a in artifacts.listing(target, admin=True)} == {None}  # the admin's copy is its own
    assert calls == ["report.html"]


def test_forget_drops_one_objects_built_artifacts_for_every_role_and_name_only() -> None:
    calls: list[str] = []
    deleted, other, same_id_diff = (
        _target("sr2-forget-0001", calls),
        _target("sr2-forget-0002", calls),
        _target("sr2-forget-0001", calls, "diff"),
    )
    for target in (deleted, other, same_id_diff):
        for admin in (False, True):
            artifacts.built(target, "record.json", admin)
            artifacts.built(target, "trace.json", admin)
    artifacts.forget("run", "sr2-forget-0001")
    assert [artifacts.kept(deleted, n, a) for n in ("record.json", "trace.json") for a in (False, True)] == [None] * 4
    assert artifacts.kept(other, "record.json", False) is not None
    assert artifacts.kept(same_id_diff, "trace.json", True) is not None
    before = len(calls)
    artifacts.built(deleted, "record.json", False)  # built anew, from the store as it is now
    assert len(calls) == before + 1


def test_a_deleted_runs_artifacts_are_forgotten_by_the_annotations_routers_call() -> None:
    from repliscope.service.routers.annotations import forget_deleted

    calls: list[str] = []
    deleted = _target("sr2-deleted-run-0001", calls)
    artifacts.built(deleted, "samples.csv", False)
    forget_deleted(SimpleNamespace(url="sqlite:///sr2-no-such.db"), "sr2-deleted-run-0001")
    assert artifacts.kept(deleted, "samples.csv", False) is None
