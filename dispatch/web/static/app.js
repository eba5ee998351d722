// The page's only script (served from here: the Content-Security-Policy allows no other).
// The overview swaps in each rendered body the server sends; a job's output is appended as
// it comes. Without it, every page still works: it just does not update by itself.
"use strict";

function live(element, on) {
  const source = new EventSource(element.dataset.events);
  for (const [name, handle] of Object.entries(on)) {
    source.addEventListener(name, (e) => handle(e.data, source));
  }
  source.onerror = () => document.body.classList.add("disconnected");
  source.onopen = () => document.body.classList.remove("disconnected");
  return source;
}

document.addEventListener("DOMContentLoaded", () => {
  const overview = document.getElementById("overview");
  if (overview) {
    live(overview, { overview: (html) => { overview.innerHTML = html; } });
  }
  const output = document.getElementById("output");
  if (output) {
    live(output, {
      output: (text) => { output.textContent += text; },
      end: (said, source) => {
        source.close();
        document.getElementById("output-end").textContent = said;
      },
    });
  }
});
