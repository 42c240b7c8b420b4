"""Where rows go: the task slots of a plan and the lookup of a key's bucket."""
