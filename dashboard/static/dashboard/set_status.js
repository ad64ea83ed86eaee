// The set page follows a regeneration: it polls the staff-only status endpoint
// while a run is going (or was just asked for) and reloads once the run is done.
(function () {
  "use strict";
  const box = document.getElementById("set-status");
  if (!box) return;
  const url = box.dataset.statusUrl;
  const startedRun = box.dataset.lastRun;
  let watching = box.dataset.state === "running" || box.dataset.watch === "1";
  let idlePolls = 0;
  const bar = document.getElementById("regeneration-progress");
  const text = document.getElementById("regeneration-text");
  const detail = document.getElementById("regeneration-detail");

  function show(status) {
    text.textContent = status.text;
    if (status.state === "running") {
      bar.hidden = false;
      bar.max = Math.max(status.total, 1);
      bar.value = status.done;
      detail.textContent = "Change Lists written: " + status.change_lists_written +
        "; Resource List pages written: " + status.resource_list_pages_written;
    }
  }

  function finished(status) {
    // A run ended since the page was drawn: draw it again, with its documents and history.
    return status.state !== "running" && String(status.last_run_id || "") !== startedRun;
  }

  async function poll() {
    if (!watching) return;
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.ok) {
        const status = await response.json();
        show(status);
        if (finished(status)) {
          const here = new URL(window.location.href);
          here.searchParams.delete("watch");
          window.location.replace(here.toString());
          return;
        }
        idlePolls = status.state === "running" ? 0 : idlePolls + 1;
        if (idlePolls > 60) watching = false; // nothing started within a minute: stop asking
      }
    } catch (error) {
      idlePolls += 1;
    }
    window.setTimeout(poll, 1000);
  }
  window.setTimeout(poll, 500);
})();
