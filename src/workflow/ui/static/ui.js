// Live refresh: every data-refresh seconds, fetch this same URL, parse it and
// swap in its <main>, so what the page shows stays current without a reload
// (the filters, the scroll position and an open <details> stay as they are).
// The server renders and escapes everything; nothing here builds HTML.
// Paused while the tab is hidden, text is selected, or a form on the page
// is being filled in (an event to send).
"use strict";
(function () {
  const seconds = Number(document.body.dataset.refresh);
  if (!(seconds > 0)) return;
  const live = document.getElementById("live");
  function editing() {
    const fields = [...document.querySelectorAll("main form input, main form textarea")];
    const options = [...document.querySelectorAll("main form select option")];
    return fields.some((f) => f === document.activeElement || f.value !== f.defaultValue)
      || options.some((o) => o.selected !== o.defaultSelected)
      || Boolean(document.activeElement && document.activeElement.closest("main form select"));
  }
  async function refresh() {
    if (document.hidden || String(window.getSelection()) || editing()) return;
    try {
      const response = await fetch(window.location.href, { cache: "no-store" });
      if (response.status === 401) { window.location.reload(); return; } // signed out: show the sign-in page
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main");
      const open = new Set([...document.querySelectorAll("main details[open] summary")].map((s) => s.textContent));
      fresh.querySelectorAll("details").forEach((d) => { if (open.has(d.querySelector("summary").textContent)) d.open = true; });
      document.querySelector("main").replaceWith(document.adoptNode(fresh));
      live.classList.remove("stale");
    } catch (error) {
      live.classList.add("stale"); // the server is away: say so, and try again
    }
  }
  window.setInterval(refresh, seconds * 1000);
})();
