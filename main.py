"""Entry point: `python main.py --help`. All the logic lives in the orchestrator package."""

from orchestrator.cli import run

if __name__ == "__main__":
    run()
