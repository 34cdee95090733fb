import sys
from pathlib import Path

# Tests import the project's packages and tests/helpers.py from the repository, installed or not.
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
