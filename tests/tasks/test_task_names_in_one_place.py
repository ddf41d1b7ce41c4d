"""A task's name is a registration, not a branch: outside ``repliscope/tasks`` no code compares with it or keys
a table on it. The only places allowed to hold the word are data (what an importer writes, a stored record's
default) and the diff package, which another change of issue 33 moves (item 8)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import repliscope
from repliscope.tasks.base import TASKS

SRC = Path(repliscope.__file__).parent
ALLOWED = {
    # data: what a translated or scaffolded manifest says, a record stored before tasks existed
    "records/evaluation.py": 1,  # EvaluationRecord.task's default: records stored before tasks existed
    "store/compare.py": 1,  # RunComparison.task's default, the same legacy records
    "importers/timm.py": 1,  # the task of every manifest the timm importer writes
    "importers/mlmodelscope.py": 4,  # MLModelScope output.type -> task table
    "importers/mlmodelscope_rules.py": 1,  # a refusal reason's stable code
    "importers/mlmodelscope_segmentation.py": 1,  # the same refusal code
    # issue 33 item 8 moves diff/ into sub-packages (another change, files moving): its branches go with it
    "cli/diff_output.py": 2,
}
PENDING = ("diff/",)


def _task_words(path: Path, names: set[str]) -> int:
    """String constants in ``path`` that are exactly a task name (docstrings and prose never are)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names)


def test_the_builtin_task_names_appear_only_in_tasks_and_data() -> None:
    names = {"image_classification", "object_detection", "semantic_segmentation"}
    assert names <= set(TASKS.names())
    found: Counter[str] = Counter()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("tasks/", *PENDING)):
            continue
        count = _task_words(path, names)
        if count:
            found[rel] = count
    for path in sorted(SRC.rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        count = sum(text.count(n) for n in names)
        if count:
            found[path.relative_to(SRC).as_posix()] = count
    unexpected = {k: v for k, v in found.items() if ALLOWED.get(k, 0) < v}
    assert not unexpected, f"task names outside repliscope/tasks (ask the Task instead): {unexpected}"
