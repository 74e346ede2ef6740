"""The dashboard (/ui) in a real headless Chromium (Debian's `chromium`, driven by Playwright for
Python, pinned in requirements.txt, pointed at that executable): sign in, add a memory, find it
in search with its score bars, edit it and see the history timeline, delete it; API keys and the
request log; a read-only key sees no edit controls and a forced edit gets the server's 403; the
page on a phone's screen; no console errors anywhere else. A screenshot of each page goes to
MEM0_UI_ARTIFACTS (default target/ui-screenshots). Run by scripts/clients.sh against a running
server (MEM0_TEST_URL, MEM0_TEST_ADMIN_KEY)."""

import json
import os
import re
import shutil
import sys
import traceback
import urllib.request
import uuid

from playwright.sync_api import expect, sync_playwright

URL = os.environ["MEM0_TEST_URL"]
ADMIN_KEY = os.environ["MEM0_TEST_ADMIN_KEY"]
CHROMIUM = os.environ.get("MEM0_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = os.environ.get("MEM0_UI_ARTIFACTS", "target/ui-screenshots")
RUN = uuid.uuid4().hex[:8]
USER = f"ui-{RUN}"


def api(method, path, body=None, key=ADMIN_KEY):
    request = urllib.request.Request(
        f"{URL}{path}", data=json.dumps(body).encode() if body is not None else None,
        headers={"x-api-key": key, "content-type": "application/json"}, method=method)
    with urllib.request.urlopen(request) as response:
        return json.load(response)


class Browser:
    """A page of its own (its own session storage) that records console errors."""

    def __init__(self, playwright_browser, viewport=None):
        self.context = playwright_browser.new_context(viewport=viewport or {"width": 1280, "height": 860})
        self.page = self.context.new_page()
        self.errors = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", lambda dialog: dialog.accept())

    def shot(self, name):
        self.page.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"), full_page=True)

    def sign_in(self, key):
        self.page.goto(f"{URL}/ui")
        expect(self.page.get_by_role("heading", name="Sign in")).to_be_visible()
        # By keyboard: the key field has the focus, Enter submits.
        expect(self.page.locator("#api-key")).to_be_focused()
        self.page.keyboard.type(key)
        self.page.keyboard.press("Enter")
        # Signed in once the first page is there (scopes for an admin, memories otherwise).
        expect(self.page.locator("h1")).to_have_text(re.compile(r"^(Scopes|Memories.*)$"))


def test_an_admin_adds_finds_edits_and_deletes_a_memory(playwright_browser):
    browser = Browser(playwright_browser)
    page = browser.page
    page.goto(f"{URL}/ui")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    browser.shot("sign-in")
    browser.sign_in(ADMIN_KEY)
    expect(page.get_by_role("heading", name="Scopes")).to_be_visible()
    browser.shot("signed-in")

    page.goto(f"{URL}/ui#/memories?user_id={USER}")
    expect(page.get_by_role("heading", name=f"Memories of user {USER}")).to_be_visible()
    text = "I am allergic to peanuts, so the hiking trip to the Alps needs snacks without nuts."
    page.fill("#new-memory", text)
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#memories").get_by_role("link", name=text)).to_be_visible()

    page.goto(f"{URL}/ui#/scopes")
    expect(page.locator(f'tr[data-id="{USER}"]')).to_contain_text("1")
    page.fill("#scope-filter", USER)
    expect(page.locator("tbody tr:visible")).to_have_count(1)
    browser.shot("scopes")
    page.goto(f"{URL}/ui#/memories?user_id={USER}")
    expect(page.locator("#memories").get_by_role("link", name=text)).to_be_visible()
    browser.shot("memories")
    # Metadata filters go to the API as they are: none of this user's memories is about travel.
    page.fill("#memory-conditions", '{"category": "travel"}')
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("No memories in this scope.")).to_be_visible()
    page.fill("#memory-conditions", "")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#memories").get_by_role("link", name=text)).to_be_visible()

    page.goto(f"{URL}/ui#/search")
    page.fill("#search-query", "peanut allergy")
    page.fill("#search-user", USER)
    page.get_by_role("button", name="Search").click()
    result = page.locator(".result").first
    expect(result).to_contain_text("allergic to peanuts")
    # The score split into its signals: semantic and keyword both hold part of it here.
    for signal in ("semantic", "keyword"):
        width = result.locator(f".bar.{signal} > span").evaluate("bar => parseFloat(bar.style.width)")
        assert width > 0, (signal, width)
    browser.shot("search")

    result.get_by_role("link").click()
    expect(page.get_by_role("heading", name="Memory")).to_be_visible()
    edited = "I am allergic to peanuts and to cashews; the Alps trip needs nut-free snacks."
    page.fill("#edit-text", edited)
    page.fill("#edit-metadata", '{"source": "dashboard"}')
    page.fill("#edit-expiration", "2030-01-31")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#memory-text")).to_have_text(edited)
    expect(page.get_by_role("row", name=re.compile("Expires"))).to_contain_text("2030-01-31")
    history = page.locator("#history li")
    expect(history).to_have_count(2)
    expect(page.locator("#history .old")).to_have_text(text)
    expect(page.locator("pre").first).to_contain_text('"source": "dashboard"')
    browser.shot("memory")

    page.get_by_role("button", name="Delete").click()  # the confirmation is accepted
    expect(page.get_by_role("heading", name=f"Memories of user {USER}")).to_be_visible()
    expect(page.get_by_text("No memories in this scope.")).to_be_visible()
    assert browser.errors == [], browser.errors


def test_admin_keys_request_log_and_configuration(playwright_browser):
    browser = Browser(playwright_browser)
    page = browser.page
    browser.sign_in(ADMIN_KEY)
    page.goto(f"{URL}/ui#/admin")
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    page.fill("#key-label", f"ui reader {RUN}")
    page.select_option("#key-role", "read")
    page.fill("#key-users", USER)
    page.get_by_role("button", name="Create").click()
    key = page.locator("#new-key").inner_text().strip()
    assert key.startswith("m0sk_"), key
    # The request log shows the dashboard's earlier calls; the configuration is shown, secrets hidden.
    expect(page.locator("#requests")).to_contain_text("POST /memories")
    expect(page.locator("#config")).to_contain_text('"embedder"')
    expect(page.locator("#usage-totals")).to_contain_text("calls")
    assert ADMIN_KEY not in page.content()
    browser.shot("admin")
    page.get_by_role("button", name="Done").click()
    row = page.locator("#keys tr", has_text=f"ui reader {RUN}")
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_contain_text("revoked")
    assert browser.errors == [], browser.errors


def test_a_read_only_key_sees_no_edit_controls_and_the_server_refuses_anyway(playwright_browser):
    reader = api("POST", "/api-keys", {"label": f"ui read {RUN}", "role": "read", "user_ids": [USER]})["key"]
    memory = api("POST", "/memories", {"messages": [{"role": "user", "content": "I play the cello on Sundays"}],
                                       "user_id": USER, "infer": False})["results"][0]
    browser = Browser(playwright_browser)
    page = browser.page
    browser.sign_in(reader)
    # Bound to one user: the memories of that user, no scopes and no admin in the navigation.
    expect(page.get_by_role("heading", name=f"Memories of user {USER}")).to_be_visible()
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    expect(page.get_by_role("link", name="Scopes")).to_have_count(0)
    expect(page.locator("#new-memory")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.get_by_role("link", name="I play the cello on Sundays").click()
    expect(page.locator("#memory-text")).to_have_text("I play the cello on Sundays")
    expect(page.locator("#edit-text")).to_have_count(0)
    expect(page.get_by_role("button", name="Save")).to_have_count(0)
    browser.shot("read-only")
    assert browser.errors == [], browser.errors
    # An edit forced from the page's own context, with its key: the server says no.
    status = page.evaluate(
        """async (id) => (await fetch(`/memories/${id}`, {method: "PUT",
             headers: {"x-api-key": sessionStorage.getItem("mem0.apiKey"), "content-type": "application/json"},
             body: JSON.stringify({text: "changed"})})).status""", memory["id"])
    assert status == 403, status
    assert api("GET", f"/memories/{memory['id']}")["memory"] == "I play the cello on Sundays"


def test_the_dashboard_fits_a_phone(playwright_browser):
    browser = Browser(playwright_browser, viewport={"width": 390, "height": 844})
    page = browser.page
    browser.sign_in(ADMIN_KEY)
    page.goto(f"{URL}/ui#/search")
    expect(page.get_by_role("heading", name="Search")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, overflow
    browser.shot("phone-search")
    assert browser.errors == [], browser.errors


def main():
    assert CHROMIUM, "no chromium executable: install Debian's chromium or set MEM0_CHROMIUM"
    os.makedirs(ARTIFACTS, exist_ok=True)
    tests = [value for name, value in globals().items() if name.startswith("test_")]
    failed = 0
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for test in tests:
            try:
                test(chromium)
                print(f"ok   {test.__name__}")
            except Exception:  # noqa: BLE001 (report every failure)
                failed += 1
                print(f"FAIL {test.__name__}")
                traceback.print_exc()
        chromium.close()
    print(f"{len(tests) - failed} passed, {failed} failed (screenshots in {ARTIFACTS})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
