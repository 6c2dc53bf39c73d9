// Baton console: live updates over server-sent events. Rows and fragments
// come from the server already escaped; nothing here builds markup from data.
(function () {
  "use strict";
  var page = document.body.dataset.page;
  var dot = document.getElementById("live");
  var source = new EventSource("/live");
  // On every (re)connection, catch up with what changed before it: the
  // feed only carries changes made while connected.
  source.onopen = function () {
    if (dot) dot.className = "on";
    var session = document.getElementById("session");
    if (session) {
      refresh("/sessions/" + session.dataset.id + "?fragment=1",
        function () { return document.getElementById("main"); }, false);
    } else if (document.getElementById("sessions")) {
      var query = window.location.search ? window.location.search + "&" : "?";
      fetch("/" + query + "fragment=1", { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        var body = document.querySelector("#sessions tbody");
        if (html === null || !body) return;
        var template = document.createElement("template");
        template.innerHTML = html;
        var fresh = template.content.querySelector("#sessions tbody");
        if (fresh) body.replaceWith(fresh);
        var shown = document.getElementById("shown");
        if (shown && fresh) shown.textContent = String(fresh.rows.length);
      });
    }
  };
  source.onerror = function () { if (dot) dot.className = ""; };

  function parseRow(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function filters() {
    var form = document.querySelector("form.filters");
    if (!form) return null;
    return {
      state: form.elements.state.value,
      agent: form.elements.agent.value.trim(),
      q: form.elements.q.value.trim().toLowerCase()
    };
  }

  // As the server's filter: TYPE at any version, TYPE@VERSION at that one.
  function admitsAgent(row, wanted) {
    if (!wanted) return true;
    var at = wanted.indexOf("@");
    if (at < 0) return row.dataset.agent === wanted;
    return row.dataset.agent === wanted.slice(0, at) &&
      row.dataset.version === wanted.slice(at + 1);
  }

  function admits(row, f) {
    return (!f.state || row.dataset.state === f.state) &&
      admitsAgent(row, f.agent) &&
      (!f.q || (row.id + " " + row.textContent).toLowerCase().indexOf(f.q) !== -1);
  }

  function onSessionList(html) {
    var row = parseRow(html);
    var body = document.querySelector("#sessions tbody");
    if (!row || !body) return;
    var old = document.getElementById(row.id);
    var f = filters();
    if (f && !admits(row, f)) { if (old) old.remove(); return; }
    row.classList.add("fresh");
    if (old) {
      old.remove();
    } else {
      var total = document.getElementById("total");
      if (total) total.textContent = String(Number(total.textContent) + 1);
    }
    body.insertBefore(row, body.firstElementChild);
    var shown = document.getElementById("shown");
    if (shown) shown.textContent = String(body.rows.length);
  }

  // How the server rendered each data-keep node, before the reader used it.
  var served = new WeakMap();
  function remember() {
    document.querySelectorAll("[data-keep][id]").forEach(function (node) {
      if (!served.has(node)) served.set(node, node.outerHTML);
    });
  }
  remember();

  var pending = null;
  function refresh(url, find, replace) {
    // Coalesce bursts: one fetch per 100 ms at most.
    if (pending) return;
    pending = window.setTimeout(function () {
      pending = null;
      fetch(url, { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        var target = find();
        if (html === null || !target) return;
        // A <details> the reader opened (Cancel…) stays open across the refresh.
        var open = Array.prototype.map.call(
          target.querySelectorAll("details[open][id]"), function (d) { return d.id; });
        // What the reader typed into a form (feedback) stays too.
        var typed = Array.prototype.map.call(
          target.querySelectorAll("input[id]:not([type=hidden]), textarea[id]"),
          function (i) { return [i.id, i.value]; });
        // A form the reader may be using (marked data-keep) stays the very
        // node it is when the server renders it as before, so that a click
        // or a keystroke in flight lands.
        var kept = Array.prototype.slice.call(target.querySelectorAll("[data-keep][id]"));
        if (replace) target.outerHTML = html; else target.innerHTML = html;
        kept.forEach(function (node) {
          var fresh = document.getElementById(node.id);
          if (fresh && fresh !== node && fresh.outerHTML === served.get(node)) {
            fresh.replaceWith(node);
          }
        });
        remember();
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
        open.forEach(function (id) {
          var details = document.getElementById(id);
          if (details) details.open = true;
        });
        typed.forEach(function (kept) {
          var input = document.getElementById(kept[0]);
          if (input && kept[1]) input.value = kept[1];
        });
      });
    }, 100);
  }

  source.addEventListener("session", function (e) {
    if (page === "sessions" && document.getElementById("sessions")) {
      onSessionList(e.data);
      return;
    }
    var session = document.getElementById("session");
    if (session) {
      var row = parseRow(e.data);
      if (row && row.id === "s-" + session.dataset.id) {
        refresh("/sessions/" + session.dataset.id + "?fragment=1",
          function () { return document.getElementById("main"); }, false);
      }
    }
  });

  source.addEventListener("agents", function () {
    if (document.getElementById("agents")) {
      refresh("/agents?fragment=1", function () { return document.getElementById("agents"); }, true);
    }
  });

  // The versions page follows rollouts and drains: it is read anew every
  // two seconds (no event announces a rollout's change).
  if (page === "versions") {
    window.setInterval(function () {
      refresh("/versions?fragment=1", function () { return document.getElementById("versions"); }, true);
    }, 2000);
  }

  // Ages tick without the server.
  window.setInterval(function () {
    var now = Date.now();
    document.querySelectorAll("time[data-at]").forEach(function (t) {
      var ms = now - Number(t.dataset.at);
      t.textContent = ms < 1000 ? ms + " ms" : ms < 60000 ? (ms / 1000).toFixed(1) + " s" :
        Math.floor(ms / 60000) + " min " + Math.floor(ms / 1000) % 60 + " s";
    });
  }, 1000);
})();
