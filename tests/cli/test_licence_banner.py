"""The licence banner: a run or sweep on Leyzer names its CC BY-NC-ND 4.0 terms first, once."""

from rich.console import Console

from ocrr.cli.licence import licence_banners


def shown(datasets) -> str:
    screen = Console(record=True, width=120)
    licence_banners(screen, datasets)
    return screen.export_text()


def test_leyzer_runs_show_the_licence_once():
    text = shown(["leyzer:source=en-US:target=es-ES", "leyzer:source=en-US:target=pl-PL", "banking77"])
    assert text.count("CC BY-NC-ND 4.0") == 1 and "non-commercial research use only" in text
    assert shown(["leyzer"]).count("leyzer: licence") == 1


def test_datasets_without_restrictions_show_nothing():
    assert shown(["banking77", "clinc150:oos=false", "demo", "csv:my.csv"]) == ""
