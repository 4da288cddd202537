"""rollhub-tally: a small rollhub plugin, the one docs/writing-a-plugin.md builds."""
