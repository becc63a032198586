"""Average the trainable weights of a run's last checkpoints into one checkpoint (for export and evaluation).

    python scripts/average_checkpoints.py OUT_DIR runs/NAME/checkpoints/step_50 runs/NAME/checkpoints/step_55 ...

See toolorchestra.train.checkpoint.average_checkpoints for why; then
`toolorchestra export-orchestrator OUT_DIR --out ...` ships it.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    from toolorchestra.train.checkpoint import average_checkpoints

    inputs = [Path(arg) for arg in argv[1:]]
    missing = [str(path) for path in inputs if not (path / "trainable.pt").is_file()]
    if missing:
        print(f"not a checkpoint (no trainable.pt): {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        out = average_checkpoints(inputs, Path(argv[0]))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"wrote {out} (mean of {len(inputs)} checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
