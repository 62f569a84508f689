package dns

import (
	"fmt"
	"time"

	"github.com/airlockhq/airlock/result"
)

// take spends one token from the server's bucket. allowed says whether the
// query may be answered. For a refused query, logIt says whether it gets a
// log entry; at most one such entry is written a second, so a flood cannot
// flood the audit log. collapsed is the number of refusals since the last
// entry that got none; the caller reports it so the log still counts every
// refused query.
func (s *Server) take() (allowed, logIt bool, collapsed int) {
	now := s.clock()
	rate, burst := s.rate()

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.bucketInit {
		s.bucketInit = true
		s.tokens = burst
		s.last = now
	}
	if elapsed := now.Sub(s.last); elapsed > 0 {
		s.tokens = min(burst, s.tokens+elapsed.Seconds()*rate)
		s.last = now
	}
	if s.tokens >= 1 {
		s.tokens--
		collapsed, s.collapsed = s.collapsed, 0
		if collapsed > 0 {
			// The summary entry the caller writes counts against the
			// once-a-second budget too.
			s.limitLogged = now
		}
		return true, false, collapsed
	}
	if s.limitLogged.IsZero() || now.Sub(s.limitLogged) >= time.Second {
		collapsed, s.collapsed = s.collapsed, 0
		s.limitLogged = now
		return false, true, collapsed
	}
	s.collapsed++
	return false, false, 0
}

// flushLimitLog logs the refusals still collapsed, so the count is not lost
// when a flood ends with the server.
func (s *Server) flushLimitLog(transport string) {
	s.mu.Lock()
	n := s.collapsed
	s.collapsed = 0
	s.mu.Unlock()
	if n > 0 {
		s.log(Query{Transport: transport, Code: result.EgressCapped, Reason: collapsedReason(n)})
	}
}

// limitedReason is the log reason for a rate-limited query that also stands
// for n earlier refusals that got no entry of their own.
func limitedReason(n int) string {
	if n == 0 {
		return reasonRateLimited
	}
	return fmt.Sprintf("%s (%s before this one not logged)", reasonRateLimited, queries(n))
}

// collapsedReason is the log reason for a summary entry standing for n
// rate-limited refusals that got no entry of their own.
func collapsedReason(n int) string {
	return fmt.Sprintf("%s (%s not logged)", reasonRateLimited, queries(n))
}

func queries(n int) string {
	if n == 1 {
		return "1 query"
	}
	return fmt.Sprintf("%d queries", n)
}

func (s *Server) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func (s *Server) rate() (rate, burst float64) {
	rate, burst = s.Rate, float64(s.Burst)
	if !(rate > 0) { // also catches NaN
		rate = defaultRate
	}
	if burst <= 0 {
		burst = defaultBurst
	}
	return rate, burst
}
