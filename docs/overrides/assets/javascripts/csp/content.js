// Material for MkDocs' inline script of partials/javascripts/content.html, unchanged, as a file: the
// platform's Content-Security-Policy runs no inline scripts (docs/overrides/).
var target=document.getElementById(location.hash.slice(1));target&&target.name&&(target.checked=target.name.startsWith("__tabbed_"))
