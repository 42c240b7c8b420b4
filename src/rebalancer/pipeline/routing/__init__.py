"""The handler map: which handler gets which event type (`Pipeline`)."""
