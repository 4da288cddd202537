"""Chat templates on the token path: rendering messages to prompt ids with continuity
(:mod:`.render`), the compiled template environment (:mod:`.environment`), and the template
alone as the judge of a history's rendering, for conformance (:mod:`.oracle`)."""
