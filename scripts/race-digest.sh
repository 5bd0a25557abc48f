#!/bin/sh
# Prints a short digest of the race detector's reports in a go test log
# ($1): for the first report, every access and goroutine
# heading with the top five frames under it. make test prints it last,
# so that a CI log cut to its start and end still names both sides of a
# race.
awk '
/^WARNING: DATA RACE/ { n++; if (n > 1) exit; print "race " n ":"; next }
n == 0 { next }
/^(Read|Write|Previous read|Previous write|Goroutine) .*:$/ { print "  " $0; frames = 0; shown = 0; next }
/^  [^ ]/ { shown = (frames < 5); frames++; if (shown) print "  " $0; next }
/^      [^ ]/ { if (shown) print "  " $0; next }
' "$1"
