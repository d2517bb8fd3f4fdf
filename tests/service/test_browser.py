"""The review page in headless Chromium (Debian's chromium + chromium-driver): predict,
correct (the token is asked once), and see the corrected label predicted for the query."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.service.app import create_app  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
    "chromium-driver; .ci/run installs them)",
)


def test_page_predicts_corrects_and_learns(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    state = open_state(tmp_path / "l.db")
    seed(state)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # to see what the page's CSP refused
    with running(create_app(state)) as url:
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
        try:
            wait = WebDriverWait(driver, 20)
            driver.get(url + "/")
            wait.until(lambda d: d.find_element(By.ID, "size").text == "9")
            query = "freeze my lost card please"
            driver.find_element(By.ID, "query").send_keys(query)
            driver.find_element(By.ID, "predict-btn").click()
            predicted = driver.find_element(By.ID, "predicted")
            wait.until(lambda d: predicted.text != "")
            assert predicted.text != "lost_card"
            assert len(driver.find_elements(By.CSS_SELECTOR, "#neighbours tr")) == 5
            driver.find_element(By.ID, "label").send_keys("lost_card")
            driver.find_element(By.ID, "correct-btn").click()
            wait.until(ec.alert_is_present()).send_keys(TOKEN)  # the token, asked once
            driver.switch_to.alert.accept()
            wait.until(lambda d: predicted.text == "lost_card")
            assert "entry 9" in driver.find_element(By.ID, "status").text
            wait.until(lambda d: d.find_element(By.ID, "size").text == "10")
            assert "lost_card" in driver.find_element(By.ID, "recent").text
            refused = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
            assert not refused, refused
        finally:
            driver.quit()
    assert len(state.substrate) == 10
