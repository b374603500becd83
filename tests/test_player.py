"""The animation player: its closing summary, its glyphs for spaces and newlines, how a
notebook shows it (with no warning), and, in a real browser (headless Chromium through
Selenium), play, pause, step forward and back, and what the page shows after each.

Needs chromium and chromedriver from the system's package manager (.ci/run installs them);
without them the browser tests are skipped here and say how to install them."""

import shutil
import time

import pytest

from exercises import player

pytestmark = pytest.mark.slow  # drives a real browser: not in make test-fast

ROUNDS = [  # ROMEO:\n + "Go" kept, "!" rejected, "x" thrown away, the big model writes "?"
    {"guesses": "Go!x", "verdicts": ["kept", "kept", "rejected", "thrown-away"],
     "target": "?", "kind": "correction"},
    {"guesses": "\nA", "verdicts": ["kept", "kept"], "target": "h", "kind": "bonus"},
]
SPACED = [  # a space guessed and rejected, then a space kept: 1 + 2 = 3 characters, 2 rounds
    {"guesses": " a", "verdicts": ["rejected", "thrown-away"], "target": "!", "kind": "correction"},
    {"guesses": " ", "verdicts": ["kept"], "target": "b", "kind": "bonus"},
]


def test_the_summary_counts_characters_rounds_and_passes():
    # ROUNDS: 2 kept + "?", then 2 kept + "h": 6 characters; SPACED: 3
    assert player.summary(ROUNDS) == ("6 characters in 2 rounds, one check of the big model "
                                      "each; plain decoding needs 6 passes, one per character")
    assert player.summary(SPACED, passes=2).startswith(
        "3 characters in 2 rounds, 2 passes of the big model; plain decoding needs 3 passes")
    crossed = player.summary(ROUNDS, passes=3, window=128)   # one check crossed a window jump
    assert crossed.startswith("6 characters in 2 rounds, 3 passes of the big model (more passes")
    assert "a jump of the 128-character window takes a second pass" in crossed
    counted = [dict(r, passes=p) for r, p in zip(ROUNDS, (1, 2))]   # passes from ex1's replay
    assert player.summary(counted) == player.summary(ROUNDS, passes=3)
    assert player.summary(ROUNDS[:1]).startswith("3 characters in 1 round, ")
    assert player.summary(ROUNDS) in player.page("ROMEO:\n", ROUNDS, "a run")


def test_a_space_guess_carries_its_glyph():
    assert "\u2423" in player.page("ROMEO:\n", SPACED, "a run"), "a space would be a blank box"


def test_showing_the_page_in_a_notebook_does_not_warn():
    import warnings

    from IPython.core.formatters import DisplayFormatter
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # any warning fails the test
        shown = player.show(player.page("ROMEO:\n", ROUNDS, "a run"))
        data, _ = DisplayFormatter().format(shown)     # what display() sends the notebook
    assert data["text/html"].startswith("<iframe srcdoc=") and "a run" in data["text/html"]


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


def open_page(browser, folder, rounds):
    path = folder / "player.html"
    path.write_text(player.page("ROMEO:\n", rounds, "a test run", delay_ms=150),
                    encoding="utf-8")
    browser.get(path.as_uri())
    return browser


@pytest.fixture
def page(browser, tmp_path):
    return open_page(browser, tmp_path, ROUNDS)


def state(browser):
    """What the page shows, read in one script call (the page re-renders while it plays, so
    element handles read one by one could go stale between two reads)."""
    return browser.execute_script("""
        const spans = [...document.querySelectorAll('#text span')].map(
            s => [s.className, s.textContent]);
        const summary = document.getElementById('summary');
        return {frame: Number(document.body.dataset.frame),
                status: document.getElementById('status').textContent,
                summary: summary.hidden ? null : summary.textContent,
                play: document.getElementById('play').textContent,
                spans: spans, text: spans.map(s => s[1]).join('')};""")


def click(browser, name):
    from selenium.webdriver.common.by import By
    browser.find_element(By.ID, name).click()
    return state(browser)


def test_stepping_through_a_run_shows_guesses_verdicts_and_the_landing(page):
    start = state(page)
    assert start["frame"] == 0 and start["text"] == "ROMEO:\n" and "press play" in start["status"]
    assert start["summary"] is None, "the summary waits for the last frame"
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
    assert last["summary"] == player.summary(ROUNDS)
    assert click(page, "step")["frame"] == 6, "stepping past the end stays at the end"
    back = click(page, "back")
    assert back["frame"] == 5 and "checks them" in back["status"]
    assert back["summary"] is None
    assert back["text"].startswith("ROMEO:\nGo?")
    for _ in range(6):
        click(page, "back")
    assert state(page)["frame"] == 0 and state(page)["text"] == "ROMEO:\n"


def test_a_space_shows_as_a_glyph_in_its_box_and_as_a_space_in_the_text(browser, tmp_path):
    page = open_page(browser, tmp_path, SPACED)
    guessed = click(page, "step")
    space, letter = guessed["spans"][1:]
    assert space == ["guess glyph", "\u2423"] and letter == ["guess", "a"]
    assert page.execute_script(
        "return document.querySelector('#text .glyph').title") == "a space"
    checked = click(page, "step")
    assert checked["spans"][1] == ["rejected glyph", "\u2423"]
    for _ in range(4):
        landed = click(page, "step")
    assert landed["text"] == "ROMEO:\n! b", "the running text keeps the real space"
    assert landed["summary"].startswith("3 characters in 2 rounds")


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
