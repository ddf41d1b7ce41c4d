"""The dataset registry's declarations (migration 0006): a store at 0005 with a registered dataset is upgraded and
keeps it (undeclared, annotations not recorded); registering records the declaration, who and when, and what the
samples annotate; a declaration is changed or withdrawn by name; a malformed one is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from repliscope.store import RunStore
from repliscope.store.migrate import _config, current, head
from repliscope.store.service_tables import (
    InvalidInputError,
    NotFoundError,
    check_declaration,
    declare_dataset,
    get_dataset,
    register_dataset,
)


def test_a_0005_store_keeps_its_registered_datasets_through_0006(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0005")
        conn.execute(
            text(
                "INSERT INTO datasets_registry (name, spec, description, created_by, created_at) "
                "VALUES ('old', 'foolbox_imagenet', 'before 0006', 'admin', '2026-11-20 10:00:00')"
            )
        )
    assert current(engine) == "0005"
    engine.dispose()
    with RunStore(url) as store:
        assert current(store.engine) == head() == "0009"
        old = get_dataset(store, "old")
        assert (old.spec, old.description, old.declared_as, old.declared_by, old.annotates) == (
            "foolbox_imagenet",
            "before 0006",
            None,
            None,
            None,
        )
        assert old.annotations is None
        declared = declare_dataset(store, "old", "imagenet-1k/val", "root")
        assert (declared.declared_as, declared.declared_by) == ("imagenet-1k/val", "root")
        assert declared.declared_at is not None


def test_registering_records_the_declaration_and_the_annotations(tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        made = register_dataset(store, "fb", "foolbox_imagenet", created_by="alice", declared_as="imagenet-1k/val")
        assert (made.declared_as, made.declared_by, made.annotations) == ("imagenet-1k/val", "alice", ("labels",))
        assert made.declared_at == made.created_at
        plain = register_dataset(store, "fb2", "foolbox_imagenet", created_by="alice")
        assert (plain.declared_as, plain.declared_by, plain.declared_at) == (None, None, None)
        withdrawn = declare_dataset(store, "fb", None, "bob")
        assert (withdrawn.declared_as, withdrawn.declared_by) == (None, "bob")
        assert get_dataset(store, "fb").declared_as is None
        with pytest.raises(NotFoundError, match="'nope' is not registered"):
            declare_dataset(store, "nope", "a/b", "bob")
        with pytest.raises(InvalidInputError, match="must be NAME/SPLIT"):
            register_dataset(store, "fb3", "foolbox_imagenet", declared_as="imagenet")


@pytest.mark.parametrize("bad", ["imagenet", "imagenet-1k/", "/val", "a/b/c", "a b/val", "x" * 101 + "/val", ""])
def test_a_malformed_declaration_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_declaration(bad)
    assert err.value.field == "as" and "must be NAME/SPLIT, e.g. imagenet-1k/val" in str(err.value)


@pytest.mark.parametrize("good", ["imagenet-1k/val", "coco/val2017", "wider_face/val", "voc.2012/val"])
def test_declarations_of_the_cli_form_are_taken(good: str) -> None:
    assert check_declaration(good) == good
