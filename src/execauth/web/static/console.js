// Progressive enhancement for the console: a live timeline and copy buttons.
// Every page works without this file; it only saves reloads and keystrokes.

const POLL_MS = 3000;

function liveTimeline() {
  const container = document.getElementById("timeline");
  const source = container && container.dataset.liveSrc;
  if (!source) return;
  const toggle = document.getElementById("live-toggle");
  const note = document.getElementById("live-note");
  let paused = false;
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", () => {
      paused = !paused;
      toggle.setAttribute("aria-pressed", String(!paused));
      toggle.textContent = paused ? "Resume live updates" : "Pause live updates";
    });
  }
  const refresh = async () => {
    if (paused || document.hidden) return;
    try {
      const response = await fetch(source, { credentials: "same-origin", redirect: "error" });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const id of ["decision-counts", "timeline-body"]) {
        const next = fresh.getElementById(id);
        const current = document.getElementById(id);
        if (next && current && next.innerHTML !== current.innerHTML) {
          current.replaceWith(document.adoptNode(next));
        }
      }
      if (note) note.textContent = "Updated " + new Date().toLocaleTimeString();
    } catch {
      // A failed poll is retried on the next tick; the page itself stays usable.
    }
  };
  setInterval(refresh, POLL_MS);
}

function copyButtons() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const target = document.getElementById(button.dataset.copy);
    if (!target) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(target.value);
        button.textContent = "Copied";
      } catch {
        target.select();
        button.textContent = "Press Ctrl+C";
      }
    });
  }
}

liveTimeline();
copyButtons();
