"""``repliscope runs tag|untag|note|rename|delete|audit`` and ``runs list --tag/--search`` on hand-made records:
what the store keeps, what is printed, and hostile input refused naming the field (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store.repository import RunStore
from tests.cli._records import pred, record


def invoke(*args: str, columns: int = 100) -> tuple[int, str, str]:
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def _two_runs() -> tuple[str, str]:
    samples = [pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [3, 2])]
    a = record(samples, run_id="a" * 32)
    b = record(samples, run_id="b" * 32, runtime="torch", model="resnet50-tv")
    with RunStore(None) as store:
        store.save(a)
        store.save(b)
    return a.run_id, b.run_id


def test_tag_note_rename_list_and_audit() -> None:
    a, b = _two_runs()
    code, out, err = invoke("runs", "tag", a[:8], "baseline", "paper:table-3", "--by", "alice")
    assert (code, err) == (0, "")
    assert "tags: baseline, paper:table-3" in out
    assert invoke("runs", "tag", b, "ablation", "--by", "bob")[0] == 0
    code, out, _ = invoke("runs", "note", a, "BGR input\nfixed in v2", "--by", "alice", "--json")
    assert code == 0 and json.loads(out)["note"] == "BGR input\nfixed in v2"
    code, out, _ = invoke("runs", "rename", b, "[bold]torch port[/bold]", "--by", "carol")
    assert code == 0
    # the list shows names and tags, markup printed as the text it is
    code, out, _ = invoke("runs", "list", columns=160)
    assert code == 0 and "[bold]torch port[/bold]" in out and "paper:table-3" in out
    code, out, _ = invoke("runs", "list", "--tag", "ablation", "--json")
    listed = json.loads(out)
    assert [(r["run_id"], r["display_name"], r["tags"]) for r in listed] == [
        (b, "[bold]torch port[/bold]", ["ablation"])
    ]
    code, out, _ = invoke("runs", "list", "--search", "FIXED IN", "--json")
    assert [r["run_id"] for r in json.loads(out)] == [a]
    code, out, _ = invoke("runs", "list", "--search", "nothing-like-this")
    assert (code, out.strip()) == (0, "no stored runs matching 'nothing-like-this'")
    code, out, _ = invoke("runs", "show", a)
    assert code == 0 and "tags: baseline, paper:table-3" in out and "    BGR input\n    fixed in v2" in out
    code, out, _ = invoke("runs", "untag", a, "baseline", "--by", "alice", "--json")
    assert [t["tag"] for t in json.loads(out)["tags"]] == ["paper:table-3"]
    code, out, _ = invoke("runs", "audit", a, "--json")
    entries = json.loads(out)
    assert [(e["action"], e["actor"], e["via"]) for e in entries] == [
        ("untag", "alice", "cli"),
        ("note", "alice", "cli"),
        ("tag", "alice", "cli"),
    ]
    code, out, _ = invoke("runs", "audit", columns=200)
    assert code == 0 and out.splitlines()[0] == "5 of 5 audit entries, newest first (UTC)"
    assert "-baseline" in out and "[bold]torch port[/bold]" in out


def test_note_from_a_file_and_the_bounds(tmp_path: Path) -> None:
    a, _ = _two_runs()
    note = tmp_path / "note.md"
    note.write_text("from a file: ü\n", encoding="utf-8")
    code, out, _ = invoke("runs", "note", a, "--file", str(note), "--by", "x", "--json")
    assert code == 0 and json.loads(out)["note"] == "from a file: ü\n"
    big = tmp_path / "big.txt"
    big.write_text("x" * 10_001, encoding="utf-8")
    code, _, err = invoke("runs", "note", a, "--file", str(big), "--by", "x")
    assert code == 2 and "note: 10001 characters; a note is at most 10000 characters" in err
    code, _, err = invoke("runs", "note", a, "--file", "/dev/null", "--by", "x")
    assert code == 2 and "not a regular file" in err
    code, _, err = invoke("runs", "tag", a, "two words", "--by", "x")
    assert code == 2 and "tag: 'two words' is not a tag (a tag is 1 to 64 characters" in err
    code, _, err = invoke("runs", "tag", a, "x;touch /tmp/pwned", "--by", "x")
    assert code == 2 and "is not a tag" in err
    code, _, err = invoke("runs", "rename", a, "a" * 201, "--by", "x")
    assert code == 2 and "display_name: 201 characters" in err
    code, _, err = invoke("runs", "rename", a, "--by", "x")
    assert code == 2 and "give the NAME, or --clear" in err
    with RunStore(None) as store:
        assert store.annotations.audit(run_id=a)[1] == 1  # only the file's note was written
        assert store.annotations.get(a).tags == []


def test_delete_needs_yes_and_is_audited() -> None:
    a, b = _two_runs()
    code, _, err = invoke("runs", "delete", a[:8], "--by", "root")
    assert code == 2 and "cannot be undone: add --yes" in err
    code, out, err = invoke("runs", "delete", a[:8], "--yes", "--by", "root")
    assert code == 0 and err == ""
    assert out.startswith(f"deleted run {a} (efficientnet-lite0 1.0.0, result hash ")
    code, out, _ = invoke("runs", "list", "--json")
    assert [r["run_id"] for r in json.loads(out)] == [b]
    code, _, err = invoke("runs", "show", a)
    assert code != 0 and f"unknown run id '{a}'" in err
    code, out, _ = invoke("runs", "audit", a, "--action", "delete", "--json")
    (entry,) = json.loads(out)
    assert (entry["actor"], entry["before"]["manifest_name"], entry["before"]["metric_name"]) == (
        "root",
        "efficientnet-lite0",
        "top1",
    )
    code, _, err = invoke("runs", "delete", "ffffffff", "--yes")
    assert code == 2 and "unknown run id 'ffffffff'" in err


def test_tag_and_search_are_refused_for_benchmarks_not_ignored() -> None:
    """``--kind benchmark`` lists benchmarks, which carry no tags: ``--tag`` / ``--search`` with it is an error,
    never a list that silently ignores them."""
    for flags in (["--tag", "baseline"], ["--search", "lite0"]):
        code, out, err = invoke("runs", "list", "--kind", "benchmark", *flags)
        assert code == 2, out + err
        assert "--tag and --search find runs; benchmarks carry no tags, names or notes" in err
