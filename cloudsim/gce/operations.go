package gce

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// operation is a zonal or global long-running operation. Its effect
// (apply) happens when it is done: at doneAt, once ready (a backed
// machine started or stopped) allows.
type operation struct {
	seq     uint64
	id      uint64
	name    string
	project string
	zone    string // "" for a global operation
	opType  string
	target  string // target link
	targetI uint64
	user    string
	insert  time.Time
	doneAt  time.Time
	ready   func() bool // extra condition; nil: none. Called with s.mu held.
	apply   func()      // the effect; called once, with s.mu held
	done    bool
	end     time.Time
	// errCode and errMsg are a failed operation's error; httpStatus its
	// HTTP status.
	errCode, errMsg string
	httpStatus      int
	firewall        bool // its effect changes a firewall
}

func newOpName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "operation-" + fmt.Sprint(time.Now().UnixMilli()) + "-" + hex.EncodeToString(b)
}

// newOp registers an operation done after cloud duration d. Call with
// s.mu held.
func (s *Server) newOp(c *call, zone, opType, target string, targetID uint64, d time.Duration) *operation {
	now := s.sim.Time()
	op := &operation{seq: s.nextSeq(), id: s.seq*7919 + 1_000_000, name: newOpName(), project: c.project, zone: zone,
		opType: opType, target: target, targetI: targetID, user: "transit@cloudsim", insert: now,
		doneAt: now.Add(s.sim.Wall(d))}
	s.ops[opKey(op.project, op.zone, op.name)] = op
	wall := op.doneAt.Sub(now)
	// Nobody needs to ask for an operation to take effect.
	time.AfterFunc(max(wall, 0), func() {
		if s.Context().Err() == nil {
			s.tick()
		}
	})
	return op
}

func opKey(project, zone, name string) string {
	if zone == "" {
		zone = "global"
	}
	return project + "/" + zone + "/" + name
}

// remember records op as the answer to the call's requestId. Call with
// s.mu held.
func (s *Server) remember(c *call, op *operation) {
	if id := c.q("requestId"); id != "" {
		s.requests[c.project+"/"+id] = op
	}
}

// replay answers a request repeated with its requestId with the operation
// the first one started (done), or says it is new. Call with s.mu held.
func (c *call) replay() (answer any, done bool, err error) {
	op, err := c.s.repeated(c)
	if err != nil || op == nil {
		return nil, err != nil, err
	}
	return c.xOp(op), true, nil
}

// repeated is the operation an earlier request with the call's requestId
// started. Call with s.mu held.
func (s *Server) repeated(c *call) (*operation, error) {
	id := c.q("requestId")
	if id == "" {
		return nil, nil
	}
	if !uuidish.MatchString(id) {
		return nil, invalidField("requestId", id, "Must be a valid UUID.")
	}
	return s.requests[c.project+"/"+id], nil
}

// tick settles every operation that is due and, if a firewall changed,
// hands the backer the new sources.
func (s *Server) tick() {
	s.mu.Lock()
	changed := s.settle()
	s.mu.Unlock()
	if changed {
		s.allow()
	}
}

// settle completes the due operations in the order they were made.
// Call with s.mu held.
func (s *Server) settle() (firewallChanged bool) {
	now := s.sim.Time()
	var due []*operation
	for _, op := range s.ops {
		if !op.done && !now.Before(op.doneAt) && (op.ready == nil || op.ready()) {
			due = append(due, op)
		}
	}
	slices.SortFunc(due, func(a, b *operation) int { return cmp.Compare(a.seq, b.seq) })
	for _, op := range due {
		op.done, op.end = true, now
		if op.apply != nil {
			op.apply()
		}
		firewallChanged = firewallChanged || op.firewall
	}
	return firewallChanged
}

// fail ends op with an error (a backed machine that did not start).
// Call with s.mu held.
func (op *operation) fail(code, msg string, status int) {
	op.done, op.errCode, op.errMsg, op.httpStatus = true, code, msg, status
}

type xOperation struct {
	Kind             string    `json:"kind"`
	ID               string    `json:"id"`
	Name             string    `json:"name"`
	Zone             string    `json:"zone,omitempty"`
	OperationType    string    `json:"operationType"`
	TargetLink       string    `json:"targetLink"`
	TargetID         string    `json:"targetId"`
	Status           string    `json:"status"`
	User             string    `json:"user"`
	Progress         int       `json:"progress"`
	InsertTime       string    `json:"insertTime"`
	StartTime        string    `json:"startTime"`
	EndTime          string    `json:"endTime,omitempty"`
	SelfLink         string    `json:"selfLink"`
	Error            *xOpError `json:"error,omitempty"`
	HTTPErrorStatus  int       `json:"httpErrorStatusCode,omitempty"`
	HTTPErrorMessage string    `json:"httpErrorMessage,omitempty"`
}

type xOpError struct {
	Errors []xOpErrorItem `json:"errors"`
}

type xOpErrorItem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// xOp renders op. Call with s.mu held.
func (c *call) xOp(op *operation) xOperation {
	x := xOperation{Kind: "compute#operation", ID: fmt.Sprint(op.id), Name: op.name, OperationType: op.opType,
		TargetLink: op.target, TargetID: fmt.Sprint(op.targetI), User: op.user,
		InsertTime: rfc3339(op.insert), StartTime: rfc3339(op.insert), Status: "RUNNING"}
	if op.zone != "" {
		x.Zone = c.link("zones", op.zone)
		x.SelfLink = c.link("zones", op.zone, "operations", op.name)
	} else {
		x.SelfLink = c.link("global", "operations", op.name)
	}
	if op.done {
		x.Status, x.Progress, x.EndTime = "DONE", 100, rfc3339(op.end)
		if op.errCode != "" {
			x.Error = &xOpError{Errors: []xOpErrorItem{{Code: op.errCode, Message: op.errMsg}}}
			x.HTTPErrorStatus = op.httpStatus
			x.HTTPErrorMessage = httpMessage(op.httpStatus)
		}
	}
	return x
}

func httpMessage(status int) string {
	switch status {
	case 403:
		return "FORBIDDEN"
	case 400:
		return "BAD REQUEST"
	case 404:
		return "NOT FOUND"
	}
	return "INTERNAL SERVER ERROR"
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format("2006-01-02T15:04:05.000-07:00")
}

// lookupOp finds the operation the path names. Call with s.mu held.
func (c *call) lookupOp() (*operation, error) {
	var zone, name string
	if c.rest[0] == "zones" {
		zone, name = c.rest[1], c.rest[3]
	} else {
		name = c.rest[2]
	}
	op := c.s.ops[opKey(c.project, zone, name)]
	if op == nil {
		where := "global"
		if zone != "" {
			where = "zones/" + zone
		}
		return nil, notFound(fmt.Sprintf("projects/%s/%s/operations/%s", c.project, where, name))
	}
	return op, nil
}

func (c *call) getOperation() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	op, err := c.lookupOp()
	if err != nil {
		return nil, err
	}
	return c.xOp(op), nil
}

// maxWait is how long a wait request holds before answering an operation
// that is not done, as Compute Engine's operations.wait does.
const maxWait = 2 * time.Minute

func (c *call) waitOperation() (any, error) {
	deadline := time.Now().Add(maxWait)
	for {
		c.s.tick()
		c.s.mu.Lock()
		op, err := c.lookupOp()
		if err != nil {
			c.s.mu.Unlock()
			return nil, err
		}
		x := c.xOp(op)
		left := op.doneAt.Sub(c.s.sim.Time())
		c.s.mu.Unlock()
		if x.Status == "DONE" || !time.Now().Before(deadline) {
			return x, nil
		}
		step := min(max(left, 5*time.Millisecond), 50*time.Millisecond, time.Until(deadline))
		if err := cloudsim.SleepWall(c.ctx, step); err != nil {
			return nil, err
		}
	}
}
