"""Security follow-up (SR2), the run page's record cache (:data:`repliscope.service.web.samples.RECENT`: the run
page, its thumbnails, the boxes panel): a run another process deleted (``repliscope runs delete`` tells no cache of
this server) and stored again with other contents is read anew, and one deleted since is the store's "unknown run",
never the withdrawn record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from repliscope.errors import StoreError
from repliscope.service.web.samples import RECENT
from repliscope.store.repository import RunStore
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN = "e7" * 16


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[RunStore, RunStore]]:
    """The server's store and another process's (the CLI's) on the same database."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as server, RunStore(url) as cli:
        yield server, cli


def test_a_run_replaced_by_another_process_is_read_anew(stores: tuple[RunStore, RunStore]) -> None:
    server, cli = stores
    withdrawn = make_record(RUN, TOP1_A)
    server.save(withdrawn)
    assert RECENT.get(server, RUN)[0].result_hash == withdrawn.result_hash
    assert RECENT.get(server, RUN[:12])[0].result_hash == withdrawn.result_hash  # by a prefix too
    cli.annotations.delete_run(RUN, "someone", "cli")
    corrected = make_record(RUN, TOP1_B)
    cli.save(corrected)
    assert corrected.result_hash != withdrawn.result_hash
    assert RECENT.get(server, RUN)[0].result_hash == corrected.result_hash
    assert RECENT.get(server, RUN[:12])[0].result_hash == corrected.result_hash
    shown = [s.topk_indices for s in RECENT.get(server, RUN)[0].samples]
    assert shown == [s.topk_indices for s in corrected.samples] != [s.topk_indices for s in withdrawn.samples]


def test_a_run_deleted_by_another_process_is_unknown_not_served_from_the_cache(
    stores: tuple[RunStore, RunStore],
) -> None:
    server, cli = stores
    server.save(make_record(RUN, TOP1_A))
    assert RECENT.get(server, RUN)[0].run_id == RUN
    cli.annotations.delete_run(RUN, "someone", "cli")
    with pytest.raises(StoreError, match=RUN[:8]):
        RECENT.get(server, RUN)
    assert all(v[0].run_id != RUN for k, v in RECENT.items.items() if k[0] == server.url)
