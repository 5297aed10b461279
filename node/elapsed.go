package node

import "time"

// since is now.Sub(start), exactly, with less work for the times an
// injected clock (Config.Clock) usually gives: without a monotonic
// reading, Time.Sub subtracts the wall clocks and then checks the result
// for overflow with an Add and an Equal, about a hundred instructions on
// Do's path. Here two readings of which at least one has no monotonic
// reading (Sub then subtracts the wall clocks too) that are less than 290
// years apart, so that the difference cannot overflow, are subtracted
// directly; anything else goes to Sub (TestSinceIsSub).
func since(now, start time.Time) time.Duration {
	if now != now.Round(0) && start != start.Round(0) {
		return now.Sub(start) // both monotonic: Sub's own quick case
	}
	const maxSec = 290 * 365 * 24 * 3600
	if s := now.Unix() - start.Unix(); s > -maxSec && s < maxSec {
		return time.Duration(s)*time.Second + time.Duration(now.Nanosecond()-start.Nanosecond())
	}
	return now.Sub(start)
}
