// cronfleet dashboard: live regions refreshed every 2 s, and the edit form's preview.
// No framework, no build step; the pages work without it (reload to refresh).
(function () {
  "use strict";
  var PERIOD = 2000;

  function busy(el) {
    var a = document.activeElement;
    if (a && el.contains(a) && a !== document.body && a.tagName !== "A") return true;
    // a selection made in the table (bulk checkboxes) must survive the refresh
    return !!el.querySelector("input[type=checkbox]:checked");
  }

  function refresh(el) {
    if (document.hidden || busy(el)) return;
    var url = el.getAttribute("data-live");
    url += (url.indexOf("?") < 0 ? "?" : "&") + "partial=1";
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== el.getAttribute("data-last") && !busy(el)) {
          el.innerHTML = html;
          el.setAttribute("data-last", html);
        }
      })
      .catch(function () { /* next tick tries again */ });
  }

  function preview() {
    var box = document.getElementById("preview");
    var input = document.getElementById("e-schedule");
    var zone = document.getElementById("e-timezone");
    if (!box || !input) return;
    var timer = null;
    function show() {
      fetch("/preview", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json",
                   "X-CSRF-Token": box.getAttribute("data-csrf") },
        body: JSON.stringify({ expr: input.value, timezone: zone ? zone.value : "" })
      }).then(function (r) { return r.json(); }).then(function (d) {
        box.textContent = "";
        if (!d.valid) {
          var p = document.createElement("p");
          p.className = "field-error";
          p.textContent = d.error + (d.column ? " (column " + d.column + ")" : "");
          box.appendChild(p);
          return;
        }
        var h = document.createElement("p");
        h.innerHTML = "";
        var code = document.createElement("code");
        code.textContent = d.expr;
        h.appendChild(code);
        h.appendChild(document.createTextNode(" — " + d.description + " (" + d.timezone + ")"));
        box.appendChild(h);
        var ol = document.createElement("ol");
        (d.next || []).forEach(function (t) {
          var li = document.createElement("li");
          li.textContent = t;
          ol.appendChild(li);
        });
        box.appendChild(ol);
      }).catch(function () {});
    }
    function later() { clearTimeout(timer); timer = setTimeout(show, 250); }
    input.addEventListener("input", later);
    if (zone) zone.addEventListener("input", later);
    show();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelectorAll("[data-live]");
    if (live.length) {
      setInterval(function () { live.forEach(refresh); }, PERIOD);
    }
    preview();
  });
})();
