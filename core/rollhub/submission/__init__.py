"""From a submitted rollout to its one terminal outcome: futures, the task that
watches each session, completion notices, retries, rate limits and progress."""
