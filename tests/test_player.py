"""The animation player in a real browser (headless Chromium through Selenium): play, pause,
step forward and back, and what the page shows after each.

Needs chromium and chromedriver from the system's package manager (.ci/run installs them);
without them the test is skipped here and says how to install them."""

import shutil
import time

import pytest

from exercises import player

ROUNDS = [  # ROMEO:\n + "Go" kept, "!" rejected, "x" thrown away, the big model writes "?"
    {"guesses": "Go!x", "verdicts": ["kept", "kept", "rejected", "thrown-away"],
     "target": "?", "kind": "correction"},
    {"guesses": "\nA", "verdicts": ["kept", "kept"], "target": "h", "kind": "bonus"},
]


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.skip("no chromium/chromedriver: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser, tmp_path):
    path = tmp_path / "player.html"
    path.write_text(player.page("ROMEO:\n", ROUNDS, "a test run", delay_ms=150))
    browser.get(path.as_uri())
    return browser


def state(browser):
    """What the page shows, read in one script call (the page re-renders while it plays, so
    element handles read one by one could go stale between two reads)."""
    return browser.execute_script("""
        const spans = [...document.querySelectorAll('#text span')].map(
            s => [s.className, s.textContent]);
        return {frame: Number(document.body.dataset.frame),
                status: document.getElementById('status').textContent,
                play: document.getElementById('play').textContent,
                spans: spans, text: spans.map(s => s[1]).join('')};""")


def click(browser, name):
    from selenium.webdriver.common.by import By
    browser.find_element(By.ID, name).click()
    return state(browser)


def test_stepping_through_a_run_shows_guesses_verdicts_and_the_landing(page):
    start = state(page)
    assert start["frame"] == 0 and start["text"] == "ROMEO:\n" and "press play" in start["status"]
    guessed = click(page, "step")
    assert guessed["frame"] == 1 and "the draft guesses 4" in guessed["status"]
    assert [c for c, _ in guessed["spans"][1:]] == ["guess"] * 4
    checked = click(page, "step")
    assert "2 kept, the next rejected" in checked["status"]
    assert [c for c, _ in checked["spans"][1:]] == ["kept", "kept", "rejected", "thrown-away"]
    landed = click(page, "step")
    assert "writes \"?\"" in landed["status"] and "its correction" in landed["status"]
    assert landed["text"] == "ROMEO:\nGo?"
    assert [c for c, _ in landed["spans"][1:]] == ["kept new", "kept new", "correction new"]
    for _ in range(3):
        last = click(page, "step")
    assert "a bonus" in last["status"] and last["frame"] == 6
    assert last["spans"][-1][0] == "bonus new"
    assert click(page, "step")["frame"] == 6, "stepping past the end stays at the end"
    back = click(page, "back")
    assert back["frame"] == 5 and "checks them" in back["status"]
    assert back["text"].startswith("ROMEO:\nGo?")
    for _ in range(6):
        click(page, "back")
    assert state(page)["frame"] == 0 and state(page)["text"] == "ROMEO:\n"


def wait_for(page, condition, seconds=10):
    """The page's state once condition(state) holds (polled: a busy machine delays timers)."""
    deadline = time.time() + seconds
    while not condition(state(page)):
        assert time.time() < deadline, f"the page never got there: {state(page)}"
        time.sleep(0.05)
    return state(page)


def test_play_advances_and_pause_holds(page):
    playing = click(page, "play")
    assert playing["play"] == "pause"
    wait_for(page, lambda s: s["frame"] >= 2)  # playing advances a step every 150 ms
    paused = click(page, "play")
    assert paused["play"] == "play"
    time.sleep(0.4)
    assert state(page)["frame"] == paused["frame"], "pause holds the frame"
    click(page, "play")
    end = wait_for(page, lambda s: s["frame"] == 6 and s["play"] == "play")
    time.sleep(0.4)
    assert state(page) == end, "play stops at the end of the run"
