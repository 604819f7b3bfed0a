package sqllock
