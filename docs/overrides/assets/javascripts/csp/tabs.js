// Material for MkDocs' inline script of partials/javascripts/content.html (content.tabs.link),
// unchanged, as a file: the platform's Content-Security-Policy runs no inline scripts (docs/overrides/).
var tabs=__md_get("__tabs");if(Array.isArray(tabs))e:for(var set of document.querySelectorAll(".tabbed-set")){var labels=set.querySelector(".tabbed-labels");for(var tab of tabs)for(var label of labels.getElementsByTagName("label"))if(label.innerText.trim()===tab){var input=document.getElementById(label.htmlFor);input.checked=!0;continue e}}
