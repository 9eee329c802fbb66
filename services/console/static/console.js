// tink-console live updates: one EventSource per page (the URL is the body's data-live);
// the server pushes rendered HTML fragments, this script swaps them in. No build step.
(function () {
  "use strict";
  var src = document.body.getAttribute("data-live");
  if (!src || !window.EventSource) { return; }
  var status = document.getElementById("live-status");
  var es = new EventSource(src);
  function show(text, cls) { if (status) { status.textContent = text; status.className = "live-status " + cls; } }
  es.onopen = function () { show("live", "on"); };
  es.onerror = function () { show("reconnecting", "off"); };
  es.addEventListener("update", function (e) {
    var m;
    try { m = JSON.parse(e.data); } catch (err) { return; }
    (m.replace || []).forEach(function (r) {
      var node = document.getElementById(r.id);
      if (node) {
        node.outerHTML = r.html;
      } else if (r.parent) {
        var parent = document.getElementById(r.parent);
        if (parent) { parent.insertAdjacentHTML("beforeend", r.html); }
      }
    });
    (m.remove || []).forEach(function (id) {
      var node = document.getElementById(id);
      if (node) { node.parentNode.removeChild(node); }
    });
    // The machines page's legend counts the tiles of each colour.
    Array.prototype.forEach.call(document.querySelectorAll("[data-count]"), function (c) {
      c.textContent = document.querySelectorAll("#tiles .tile." + c.getAttribute("data-count")).length;
    });
  });
  // The stream missed updates (a slow tab) or its session ended: start again from the server.
  es.addEventListener("resync", function () { es.close(); window.location.reload(); });
})();
