"""A protocol's report cell is drawn by the presentation registered under its name, or the default."""

from __future__ import annotations

import pandas as pd
import pytest

from ocrr.errors import OcrrError
from ocrr.protocols.base import Protocol
from ocrr.report.presentation import default_cell


class OldStyle(Protocol):
    """A protocol written before presentations were plug-ins: it drew its cells itself."""

    name = "old_style"

    def report_cell(self, rows, summary, title, styles):
        return [], [], {}


def test_a_protocol_still_drawing_its_own_cells_is_told_how_to_register_a_presentation():
    with pytest.raises(OcrrError, match=r"register_presentation\('old_style', cell\)"):
        default_cell(OldStyle(), pd.DataFrame(), pd.DataFrame(), "title", {})
