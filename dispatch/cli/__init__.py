"""The operator's command line: the commands (`commands`), how their answers are shown
(`views`) and the checks of `dispatch doctor` (`doctor`)."""

from dispatch.cli.commands import main

__all__ = ["main"]
