"""Tokens (hashed, roles, revoke), the dataset registry, the manifest store and the jobs table."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from repliscope.store import RunStore
from repliscope.store.accounts import (
    authenticate,
    create_token,
    has_admin,
    list_tokens,
    revoke_token,
    role_allows,
)
from repliscope.store.models import TokenRow
from repliscope.store.service_tables import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    create_job,
    get_dataset,
    get_job,
    get_manifest,
    list_datasets,
    list_jobs,
    list_manifests,
    put_manifest,
    register_dataset,
    remove_dataset,
    update_job,
)
from tests.store.backends import BACKENDS, POSTGRES, wipe


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else str(POSTGRES)
    with RunStore(url) as s:
        try:
            yield s
        finally:
            if request.param != "sqlite":
                wipe(s.engine)


def test_tokens_are_hashed_roles_ordered_and_revocable(store: RunStore) -> None:
    assert not has_admin(store)
    admin = create_token(store, "ops", "admin")
    viewer = create_token(store, "dashboard", "viewer")
    assert admin.startswith("rs_") and len(admin) == 3 + 43 and admin != viewer
    with Session(store.engine) as session:
        hashes = session.scalars(select(TokenRow.token_sha256).order_by(TokenRow.id)).all()
    assert hashes == [hashlib.sha256(admin.encode()).hexdigest(), hashlib.sha256(viewer.encode()).hexdigest()]
    principal = authenticate(store, admin)
    assert principal is not None and (principal.name, principal.role) == ("ops", "admin")
    assert principal.allows("runner") and principal.allows("viewer")
    v = authenticate(store, viewer)
    assert v is not None and v.allows("viewer") and not v.allows("runner") and not v.allows("admin")
    assert role_allows("runner", "viewer") and not role_allows("runner", "admin")
    assert has_admin(store)
    assert authenticate(store, admin[:-1] + ("A" if admin[-1] != "A" else "B")) is None
    assert authenticate(store, "") is None and authenticate(store, None) is None
    assert authenticate(store, "Bearer " + admin) is None
    info = revoke_token(store, principal.token_id)
    assert info.revoked_at is not None and authenticate(store, admin) is None and not has_admin(store)
    assert revoke_token(store, principal.token_id).revoked_at == info.revoked_at  # twice: unchanged
    assert [(t.name, t.role, t.revoked_at is None) for t in list_tokens(store)] == [
        ("ops", "admin", False),
        ("dashboard", "viewer", True),
    ]
    with pytest.raises(InvalidInputError) as bad:
        create_token(store, "x", "root")
    assert bad.value.field == "role" and "viewer, runner, admin" in str(bad.value)
    with pytest.raises(NotFoundError):
        revoke_token(store, 999)


def test_dataset_registry(store: RunStore, tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    from PIL import Image

    Image.new("RGB", (8, 8), (10, 20, 30)).save(folder / "cat_3.jpg")
    ds = register_dataset(store, "foolbox", "foolbox_imagenet", "the 20 foolbox images", created_by="ops")
    assert (ds.name, ds.spec, ds.description, ds.created_by) == (
        "foolbox",
        "foolbox_imagenet",
        "the 20 foolbox images",
        "ops",
    )
    register_dataset(store, "local", str(folder))
    assert [d.name for d in list_datasets(store)] == ["foolbox", "local"]
    assert get_dataset(store, "local").spec == str(folder)
    with pytest.raises(ConflictError) as conflict:
        register_dataset(store, "foolbox", "foolbox_imagenet")
    assert conflict.value.field == "name"
    with pytest.raises(InvalidInputError) as missing:
        register_dataset(store, "gone", str(tmp_path / "nowhere"))
    assert missing.value.field == "spec" and "neither a registered dataset nor a directory" in str(missing.value)
    with pytest.raises(InvalidInputError) as badname:
        register_dataset(store, "../etc", "foolbox_imagenet")
    assert badname.value.field == "name"
    remove_dataset(store, "local")
    with pytest.raises(NotFoundError) as nf:
        get_dataset(store, "local")
    assert nf.value.field == "dataset" and "registered: foolbox" in str(nf.value)


def test_manifest_store_is_immutable(store: RunStore) -> None:
    text = "name: efficientnet-lite0\nversion: 1.0.0\n"
    stored, created = put_manifest(store, "efficientnet-lite0", "1.0.0", text, uploaded_by="ops")
    assert created and stored.ref == "efficientnet-lite0@1.0.0"
    assert stored.sha256 == hashlib.sha256(text.encode()).hexdigest()
    again, created_again = put_manifest(store, "efficientnet-lite0", "1.0.0", text)
    assert not created_again and again.uploaded_by == "ops"
    with pytest.raises(ConflictError) as conflict:
        put_manifest(store, "efficientnet-lite0", "1.0.0", text + "# changed\n")
    assert conflict.value.field == "version" and "immutable" in str(conflict.value)
    put_manifest(store, "efficientnet-lite0", "1.1.0", text.replace("1.0.0", "1.1.0"))
    put_manifest(store, "blazeface", "0.7.0", "name: blazeface\n")
    assert get_manifest(store, "efficientnet-lite0@1.0.0").text == text
    assert [m.ref for m in list_manifests(store)] == [
        "blazeface@0.7.0",
        "efficientnet-lite0@1.0.0",
        "efficientnet-lite0@1.1.0",
    ]
    assert [m.ref for m in list_manifests(store, "NET-LITE")] == [
        "efficientnet-lite0@1.0.0",
        "efficientnet-lite0@1.1.0",
    ]
    assert list_manifests(store, "%") == []
    with pytest.raises(NotFoundError):
        get_manifest(store, "efficientnet-lite0@9.9.9")
    with pytest.raises(InvalidInputError) as bad:
        get_manifest(store, "efficientnet-lite0")
    assert bad.value.field == "manifest"


def test_jobs_table(store: RunStore) -> None:
    job = create_job(
        store, "evaluate", "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox", {"limit": 5}, created_by="ci"
    )
    assert (job.status, job.progress_done, job.progress_total, job.log, job.result_ids, job.started_at) == (
        "queued",
        0,
        None,
        "",
        [],
        None,
    )
    running = update_job(store, job.id, status="running", progress_total=20, append_log="loading model")
    assert running.started_at is not None and running.finished_at is None
    update_job(store, job.id, progress_done=5, append_log="5/20")
    done = update_job(store, job.id, status="succeeded", progress_done=20, result_ids=["a" * 32])
    assert (done.status, done.progress_done, done.progress_total, done.log, done.result_ids) == (
        "succeeded",
        20,
        20,
        "loading model\n5/20\n",
        ["a" * 32],
    )
    assert done.finished_at is not None and done.finished_at >= done.started_at  # type: ignore[operator]
    assert get_job(store, job.id) == done and get_job(store, job.id).options == {"limit": 5}
    other = create_job(store, "bench", "efficientnet-lite0@1.0.0", None, None, {})
    assert {j.id for j in list_jobs(store)} == {job.id, other.id}
    assert [j.id for j in list_jobs(store, status="succeeded")] == [job.id]
    with pytest.raises(InvalidInputError) as bad_kind:
        create_job(store, "train", "m@1", None, None, {})
    assert bad_kind.value.field == "kind"
    with pytest.raises(InvalidInputError):
        update_job(store, job.id, status="done")
    with pytest.raises(NotFoundError) as nf:
        get_job(store, "nope")
    assert nf.value.field == "job"
