// cronfleet dashboard: live regions refreshed every 2 s, and the edit form's preview.
// No framework, no build step; the pages work without it (reload to refresh).
(function () {
  "use strict";
  var PERIOD = 2000;

  function busy(el) {
    var a = document.activeElement;
    if (a && el.contains(a) && a !== document.body && a.tagName !== "A") return true;
    // the slot under the pointer is being read: do not swap the timeline under it
    if (el.querySelector(".timeline:hover, .heat:hover")) return true;
    // an action's form is open (the job page's action bar)
    if (el.querySelector("details.act[open]")) return true;
    // a selection made in the table (bulk checkboxes) must survive the refresh
    return !!el.querySelector("input[type=checkbox]:checked");
  }

  // a followed log (a running command's output): kept scrolled to its end unless the
  // reader scrolled up, and kept where it was otherwise
  function logState(el) {
    var pre = el.querySelector("pre.log");
    if (!pre) return null;
    return { top: pre.scrollTop,
             end: pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4 };
  }

  function restoreLog(el, st) {
    var pre = el.querySelector("pre.log");
    if (!pre) return;
    pre.scrollTop = (!st || st.end) ? pre.scrollHeight : st.top;
  }

  function refresh(el) {
    var url = el.getAttribute("data-live");
    if (!url || document.hidden || busy(el)) return;
    url += (url.indexOf("?") < 0 ? "?" : "&") + "partial=1";
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== el.getAttribute("data-last") && !busy(el)) {
          var st = logState(el);
          el.innerHTML = html;
          el.setAttribute("data-last", html);
          restoreLog(el, st);
          scrollBoxes();
        }
        // the region says it will not change any more (a run or a backfill ended)
        if (el.querySelector("[data-final]")) el.removeAttribute("data-live");
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
          var ms = Date.parse(t);
          li.textContent = isNaN(ms) ? t : fmt(ms / 1000, d.timezone || "UTC");
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

  // -- the slot timeline: one <i> per slot; times and run ids in #timeline-data; a
  // run's details fetched when its cell is hovered or reached by keyboard
  var labels = {};
  var formats = {};
  // a cell's class is its state's code (read.CELL_CODES)
  var CODES = { su: "succeeded", fa: "failed", "in": "interrupted", ca: "cancelled",
                mi: "missed", pa: "paused", sk: "skipped", ru: "running", pe: "pending",
                no: "no slot recorded" };
  var shown = null;  // the cell the status line describes

  function tlData() {
    var el = document.getElementById("timeline-data");
    if (!el) return null;
    if (el._d) return el._d;
    var raw = JSON.parse(el.textContent);
    // [v, n]: v repeated n times
    function flat(a) {
      var out = [];
      a.forEach(function (x) {
        if (typeof x === "number") { out.push(x); return; }
        for (var k = 0; k < x[1]; k++) out.push(x[0]);
      });
      return out;
    }
    raw.dt = flat(raw.dt);
    raw.runs = flat(raw.runs);
    var n = raw.dt.length + 1, times = new Array(n), runs = new Array(raw.runs.length);
    var t = raw.t0, i, prev = 0;
    for (i = 0; i < n; i++) { if (i) t += raw.dt[i - 1]; times[i] = t; }
    for (i = 0; i < runs.length; i++) {
      if (raw.runs[i]) { prev += raw.runs[i]; runs[i] = prev; } else runs[i] = 0;
    }
    el._d = { times: times, runs: runs, tz: raw.tz };
    return el._d;
  }

  function fmt(secs, tz) {
    var f = formats[tz];
    if (!f) {
      try {
        f = new Intl.DateTimeFormat("en-GB", { timeZone: tz, year: "numeric", month: "2-digit",
          day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
          hourCycle: "h23", timeZoneName: "short" });
      } catch (e) {
        f = new Intl.DateTimeFormat("en-GB", { timeZone: "UTC", year: "numeric",
          month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
          second: "2-digit", hourCycle: "h23", timeZoneName: "short" });
      }
      formats[tz] = f;
    }
    var p = {};
    f.formatToParts(new Date(secs * 1000)).forEach(function (x) { p[x.type] = x.value; });
    // the server's format: 2026-12-01 14:12:05 CET
    return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" +
      p.second + " " + (p.timeZoneName || "");
  }

  function cellIndex(tl, cell) { return Array.prototype.indexOf.call(tl.children, cell); }

  function describeCell(tl, i) {
    var d = tlData(), cell = tl.children[i], status = document.getElementById("tl-status");
    if (!d || !cell) return;
    var head = fmt(d.times[i], d.tz) + ": ";
    var rid = d.runs[i];
    var text = head + (rid ? (CODES[cell.className.replace(" cur", "")] || cell.className) :
      "no run recorded for this slot");
    function show(t) {
      cell.title = t;
      if (status) status.textContent = "Slot " + (i + 1) + " of " + tl.children.length +
        ", " + t + (rid ? " (run #" + rid + ")" : "");
    }
    shown = cell;
    show(labels[rid] ? head + labels[rid] : text);
    if (rid && !labels[rid]) {
      fetch("/runs/" + rid + "/label", { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (j) {
          if (!j) return;
          labels[rid] = j.label;
          cell.title = head + j.label;
          // the status line speaks of the cell shown last: a late answer for a cell the
          // cursor or the pointer has left must not overwrite it
          if (shown === cell && tl.children[i] === cell) show(head + j.label);
        }).catch(function () {});
    }
  }

  function moveTo(tl, i) {
    var n = tl.children.length;
    if (!n) return;
    i = Math.max(0, Math.min(n - 1, i));
    var old = tl.querySelector("i.cur");
    if (old) old.classList.remove("cur");
    tl.children[i].classList.add("cur");
    tl._cur = i;
    if (tl.children[i].scrollIntoView) tl.children[i].scrollIntoView({ block: "nearest" });
    describeCell(tl, i);
  }

  function rowLength(tl) {
    var kids = tl.children, top = kids.length ? kids[0].offsetTop : 0, k = 0;
    while (k < kids.length && kids[k].offsetTop === top) k++;
    return Math.max(1, k);
  }

  function dayFrom(i, dir) {
    var d = tlData();
    if (!d) return i + dir;
    var target = d.times[i] + dir * 86400, j = i;
    if (dir > 0) { while (j < d.times.length - 1 && d.times[j] < target) j++; }
    else { while (j > 0 && d.times[j] > target) j--; }
    return j === i ? i + dir : j;
  }

  function openRun(i) {
    var d = tlData();
    if (d && d.runs[i]) window.location.href = "/runs/" + d.runs[i];
  }

  function timeline() {
    document.addEventListener("mouseover", function (e) {
      var c = e.target;
      if (c && c.tagName === "I" && c.parentNode && c.parentNode.id === "timeline") {
        describeCell(c.parentNode, cellIndex(c.parentNode, c));
      }
    });
    document.addEventListener("click", function (e) {
      var c = e.target;
      if (c && c.tagName === "I" && c.parentNode && c.parentNode.id === "timeline") {
        openRun(cellIndex(c.parentNode, c));
      }
    });
    document.addEventListener("focusin", function (e) {
      var tl = e.target;
      if (tl && tl.id === "timeline" && tl.children.length) {
        moveTo(tl, typeof tl._cur === "number" ? tl._cur : tl.children.length - 1);
      }
    });
    document.addEventListener("keydown", function (e) {
      var tl = e.target;
      if (!tl || tl.id !== "timeline" || !tl.children.length) return;
      var i = typeof tl._cur === "number" ? tl._cur : tl.children.length - 1, to = null;
      switch (e.key) {
        case "ArrowRight": to = i + 1; break;
        case "ArrowLeft": to = i - 1; break;
        case "ArrowDown": to = i + rowLength(tl); break;
        case "ArrowUp": to = i - rowLength(tl); break;
        case "PageDown": to = dayFrom(i, 1); break;
        case "PageUp": to = dayFrom(i, -1); break;
        case "Home": to = 0; break;
        case "End": to = tl.children.length - 1; break;
        case "Enter": case " ": openRun(i); e.preventDefault(); return;
        default: return;
      }
      e.preventDefault();
      moveTo(tl, to);
    });
  }

  function paramRows() {
    var add = document.getElementById("add-param");
    if (!add) return;
    add.hidden = false;
    add.addEventListener("click", function () {
      var n = add.parentNode.querySelectorAll(".param").length + 1;
      var span = document.createElement("span");
      span.className = "param";
      [["pk-", "Name ", "param_key", 100], ["pv-", "Value ", "param_value", 4096]]
        .forEach(function (f) {
          var label = document.createElement("label");
          label.htmlFor = f[0] + n;
          label.textContent = f[1] + n;
          var input = document.createElement("input");
          input.id = f[0] + n; input.name = f[2]; input.maxLength = f[3];
          input.autocomplete = "off";
          span.appendChild(label); span.appendChild(input);
        });
      add.parentNode.insertBefore(span, add);
      span.querySelector("input").focus();
    });
  }

  // the jobs page: one box selects (or clears) every job of the page for a bulk action
  function selectAll() {
    document.addEventListener("change", function (e) {
      var box = e.target;
      if (!box || box.id !== "select-all") return;
      document.querySelectorAll("input[type=checkbox][form=bulk]").forEach(function (c) {
        c.checked = box.checked;
      });
    });
  }

  // the overview's heat map: a cell says its minute and verdict on hover, opens its run

  function heatCell(e) {
    var c = e.target;
    if (!c || c.tagName !== "I" || !c.parentNode || !c.parentNode.classList ||
        !c.parentNode.classList.contains("hm")) return null;
    var row = c.parentNode, list = row.closest("ol.heat");
    var k = Array.prototype.indexOf.call(row.children, c);
    var runs = (row.getAttribute("data-runs") || "").split(",");
    var start = +list.getAttribute("data-start") + 60 * k;
    return { cell: c, run: runs[k] || "", start: start, tz: list.getAttribute("data-tz") };
  }

  function heatmap() {
    document.addEventListener("mouseover", function (e) {
      var h = heatCell(e);
      if (h && !h.cell.title) {
        h.cell.title = fmt(h.start, h.tz).slice(11, 16) + ": " + (CODES[h.cell.className] ||
          h.cell.className) + (h.run ? " (run #" + h.run + ")" : "");
      }
    });
    document.addEventListener("click", function (e) {
      var h = heatCell(e);
      if (h && h.run) window.location.href = "/runs/" + h.run;
    });
  }

  // a table wider than the screen scrolls in its box: the box then takes the keyboard
  // focus (arrow keys scroll it), and only then
  function scrollBoxes() {
    document.querySelectorAll(".scroll").forEach(function (box) {
      if (box.scrollWidth > box.clientWidth + 1) {
        box.setAttribute("tabindex", "0");
        if (!box.hasAttribute("role")) {
          box.setAttribute("role", "region");
          var sec = box.closest("section"), h = sec && sec.querySelector("h2, h1");
          box.setAttribute("aria-label", (h ? h.textContent + ": " : "") +
            "a table wider than the screen");
        }
      } else {
        box.removeAttribute("tabindex");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    scrollBoxes();
    window.addEventListener("resize", scrollBoxes);
    timeline();
    paramRows();
    selectAll();
    heatmap();
    var live = document.querySelectorAll("[data-live]");
    document.querySelectorAll("pre.log").forEach(function (pre) {
      pre.scrollTop = pre.scrollHeight;
    });
    if (live.length) {
      setInterval(function () { live.forEach(refresh); }, PERIOD);
    }
    preview();
  });
})();
