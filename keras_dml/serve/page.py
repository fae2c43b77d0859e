"""The search page `GET /` serves: one self-contained HTML file (no external script,
style or font), which posts a dropped or chosen photo to `/search` and shows the
top-k catalogue images with their labels, similarities and match decisions."""

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>keras-dml visual search</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
  h1 { font-size: 1.4rem; margin: 0 0 1rem; }
  #drop { border: 2px dashed #888; border-radius: 8px; padding: 1.5rem; text-align: center;
          background: #fafafa; }
  #drop.over { background: #e8f0ff; border-color: #36c; }
  #controls { margin: 1rem 0; display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; }
  #query { max-height: 160px; display: none; margin: 1rem 0; border-radius: 4px; }
  #status { margin: .5rem 0; min-height: 1.2em; }
  #status.error { color: #b00020; }
  #results { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr));
             gap: 1rem; }
  * { box-sizing: border-box; }
  .card { border: 1px solid #ddd; border-radius: 6px; padding: .5rem; font-size: .85rem;
          min-width: 0; overflow-wrap: anywhere; }
  .card img { width: 100%; height: 150px; object-fit: contain; background: #f3f3f3; }
  .match { color: #0a7a2f; font-weight: 600; }
  .nomatch { color: #888; }
</style>
</head>
<body>
<h1>keras-dml visual search</h1>
<div id="drop">Drop a photo here, or <input type="file" id="file" accept="image/*"></div>
<div id="controls">
  <label>results <input type="number" id="k" value="10" min="1" max="100"></label>
  <label>token <input type="password" id="token" placeholder="if the service asks"></label>
</div>
<img id="query" alt="your photo">
<div id="status"></div>
<div id="results"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
$("token").value = sessionStorage.getItem("keras-dml-token") || "";
$("token").addEventListener("change", () =>
  sessionStorage.setItem("keras-dml-token", $("token").value));

function headers() {
  const token = $("token").value;
  return token ? {"Authorization": "Bearer " + token} : {};
}

function status(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function loadImage(img, url) {
  const answer = await fetch(url, {headers: headers()});
  if (!answer.ok) { img.alt = "image unavailable"; return; }
  img.src = URL.createObjectURL(await answer.blob());
}

function card(item) {
  const div = document.createElement("div");
  div.className = "card";
  const img = document.createElement("img");
  img.alt = String(item.label);
  div.appendChild(img);
  if (item.image_url) { loadImage(img, item.image_url); }
  const text = document.createElement("div");
  const decision = item.match === null ? "" :
    (item.match ? '<span class="match">match</span>' : '<span class="nomatch">no match</span>');
  text.innerHTML = "<b></b><br>similarity " + item.similarity.toFixed(3) + " " + decision;
  text.querySelector("b").textContent = String(item.label);
  div.appendChild(text);
  div.title = String(item.id);
  return div;
}

async function search(file) {
  $("query").src = URL.createObjectURL(file);
  $("query").style.display = "block";
  $("results").replaceChildren();
  status("searching...");
  const form = new FormData();
  form.append("image", file);
  const k = encodeURIComponent($("k").value || "10");
  try {
    const answer = await fetch("/search?k=" + k, {method: "POST", body: form,
                                                  headers: headers()});
    const body = await answer.json();
    if (!answer.ok) { status(body.detail || answer.statusText, true); return; }
    body.results.forEach((item) => $("results").appendChild(card(item)));
    status(body.results.length + " results from collection " + body.collection +
           " in " + body.took_ms.toFixed(0) + " ms");
  } catch (error) {
    status("the service did not answer: " + error, true);
  }
}

$("file").addEventListener("change", () => { if ($("file").files[0]) search($("file").files[0]); });
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files[0]) search(e.dataTransfer.files[0]);
});
</script>
</body>
</html>
"""
