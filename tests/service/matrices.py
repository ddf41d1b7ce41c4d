"""A hand-made ``StackMatrix`` (two stacks of Lite0 on the 20 foolbox images) for the service's tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

MATRIX_ID = "5ac0" + "ab" * 14
OLD_KEY = "0123456789ab"
FLIPPED = "foolbox_imagenet/07_ant.png"


def make_matrix(matrix_id: str = MATRIX_ID, manifest: str = "efficientnet-lite0") -> Any:
    """Stacks ``current`` (onnxruntime 1.23.2) and ``onnxruntime==1.20.1`` (key OLD_KEY): top-1 0.90 / 0.85,
    agreement 19/20, one sample right on current and wrong on the old one, max |Δ output| 0.0123."""
    from repliscope.stacks.matrix import MatrixDataset, MatrixManifest, StackEntry, StackMatrix, StackPair

    return StackMatrix(
        matrix_id=matrix_id,
        created_at=datetime(2026, 11, 23, 18, 0, 5, tzinfo=UTC),
        manifest=MatrixManifest(name=manifest, version="1.0.0", sha256="e" * 64),
        runtime="onnxruntime",
        dataset=MatrixDataset(identity="foolbox-identity-0001", n=20),
        stacks=[
            StackEntry(
                key="current",
                spec="current",
                versions={"onnxruntime": "1.23.2", "numpy": "2.3.5"},
                agent_id="host-1",
                run_id="a1" * 16,
                top1=0.9,
                top5=1.0,
                result_hash="1" * 64,
                seconds=2.5,
                throughput=8.0,
                evaluated=20,
                failed=0,
            ),
            StackEntry(
                key=OLD_KEY,
                spec="onnxruntime==1.20.1",
                versions={"onnxruntime": "1.20.1", "numpy": "1.26.4"},
                agent_id="host-2",
                run_id="b2" * 16,
                top1=0.85,
                top5=1.0,
                result_hash="2" * 64,
                seconds=3.25,
                throughput=6.2,
                evaluated=20,
                failed=0,
            ),
        ],
        pairs=[
            StackPair(
                a="current",
                b=OLD_KEY,
                compared=20,
                agreement=0.95,
                agree=19,
                flips_ab=[FLIPPED],
                flips_ba=[],
                max_abs_output_diff=0.0123,
                mean_abs_output_diff=0.000456,
                outputs_compared=20,
                result_hash_equal=False,
            )
        ],
    )
