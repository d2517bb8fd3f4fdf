"""Screenshot the review page of `ocrr serve` (demo set, MiniLM) after one predict and one
correction, with headless Chromium (Debian: apt-get install chromium chromium-driver).

Usage: PYTHONPATH=src python scripts/screenshot_review_page.py docs/figures/review-page.png
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

TOKEN = secrets.token_urlsafe(32)  # a real random token: the service refuses weak ones


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ocrr.cli",
                "ledger",
                "keygen",
                f"{tmp}/key.pem",
                "--origin",
                "example.com/helpdesk",
            ],
            check=True,
        )
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ocrr.cli",
                "serve",
                "--ledger",
                f"{tmp}/demo.db",
                "--encoder",
                "minilm",
                "--fit",
                "demo",
                "--port",
                str(port),
                "--key",
                f"{tmp}/key.pem",
                "--origin",
                "example.com/helpdesk",
            ],
            env={**os.environ, "OCRR_TOKEN": TOKEN},
        )
        try:
            for _ in range(600):
                try:
                    json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/health"))
                    break
                except OSError:
                    time.sleep(0.2)
            options = webdriver.ChromeOptions()
            options.binary_location = shutil.which("chromium")
            for arg in (
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1280,860",
                "--hide-scrollbars",
            ):
                options.add_argument(arg)
            driver = webdriver.Chrome(
                options=options, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
            )
            try:
                wait = WebDriverWait(driver, 30)
                driver.get(f"http://127.0.0.1:{port}/")
                wait.until(lambda d: d.find_element(By.ID, "size").text not in ("", "…"))
                driver.find_element(By.ID, "query").send_keys("my parcel of new headphones never came")
                driver.find_element(By.ID, "predict-btn").click()
                wait.until(lambda d: d.find_element(By.ID, "predicted").text != "")
                driver.find_element(By.ID, "label").send_keys("missing_delivery")
                driver.find_element(By.ID, "correct-btn").click()
                wait.until(ec.alert_is_present()).send_keys(TOKEN)
                driver.switch_to.alert.accept()
                wait.until(lambda d: d.find_element(By.ID, "predicted").text == "missing_delivery")
                driver.find_element(By.ID, "verify-btn").click()
                wait.until(lambda d: "intact" in d.find_element(By.ID, "verified").text)
                driver.save_screenshot(out)
            finally:
                driver.quit()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "review-page.png")
