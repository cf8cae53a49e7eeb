// Swagger UI on /api/docs/: reads the schema URL from the page (no inline script: the CSP forbids it).
(function () {
  "use strict";
  var node = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: node.dataset.schemaUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,          // the default validator is an external service
    persistAuthorization: true,
  });
})();
