"""One model call after admission: its plan (:mod:`.plan`: the policy, the prompt, the
sampling parameters, the weight version) and its run (:mod:`.runner`: sampling, parsing,
the commit)."""
