"""One training run: the app (start, resume, faults), the loop, the Trainer and its parts
(collection, updates, state), evaluation, stop requests, data parallel and launch."""
