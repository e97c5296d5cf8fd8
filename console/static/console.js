// popmq console: the overview's live charts (uPlot) fed by server-sent events.
// The console's own script: no inline script anywhere (the CSP forbids it).
"use strict";

(function () {
  const WINDOW_S = 900;
  const SERIES = [
    ["send", "send/s", "#2f6fdf"],
    ["receive", "receive/s", "#1b9e77"],
    ["ack", "ack/s", "#7570b3"],
    ["nack", "nack/s", "#d95f02"],
    ["dlq", "DLQ/s", "#e7298a"],
  ];

  function chart(element, title, series) {
    const width = Math.max(320, element.clientWidth || 800);
    const options = {
      title: title,
      width: width,
      height: 220,
      scales: { x: { time: true } },
      series: [{}].concat(
        series.map(([, label, stroke]) => ({ label: label, stroke: stroke, width: 2 }))
      ),
    };
    const data = [[]].concat(series.map(() => []));
    return { plot: new uPlot(options, data, element), data: data, keys: series.map((s) => s[0]) };
  }

  function push(c, point) {
    c.data[0].push(point.t);
    c.keys.forEach((key, i) => c.data[i + 1].push(point[key]));
    const oldest = point.t - WINDOW_S;
    while (c.data[0].length && c.data[0][0] < oldest) {
      c.data.forEach((column) => column.shift());
    }
  }

  function describe(point) {
    const parts = SERIES.map(([key, label]) => label + " " + point[key]);
    parts.push("lag " + point.lag);
    return parts.join(" · ");
  }

  function start() {
    const ratesElement = document.getElementById("rates-chart");
    if (!ratesElement || typeof uPlot === "undefined") {
      return;
    }
    const rates = chart(ratesElement, "Messages per second", SERIES);
    const lag = chart(document.getElementById("lag-chart"), "Total lag (messages)", [
      ["lag", "lag", "#444"],
    ]);
    const now = document.getElementById("now");
    let count = 0;
    let maxSend = 0;

    function add(points) {
      points.forEach((point) => {
        push(rates, point);
        push(lag, point);
      });
      if (points.length) {
        count += points.length;
        rates.plot.setData(rates.data);
        lag.plot.setData(lag.data);
        const last = points[points.length - 1];
        now.textContent = describe(last);
        ratesElement.dataset.points = String(count);
        points.forEach((point) => {
          maxSend = Math.max(maxSend, point.send);
        });
        ratesElement.dataset.maxSend = String(maxSend);
      }
    }

    const events = new EventSource(ratesElement.dataset.events);
    events.addEventListener("history", (e) => add(JSON.parse(e.data).points));
    events.addEventListener("point", (e) => add([JSON.parse(e.data)]));
    events.addEventListener("ended", () => {
      events.close();
      window.location.assign("/login");
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
