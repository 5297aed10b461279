package cluster

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
)

// TestLateSendToDeadMemberForgotten: a message queued for a member after
// its death event dropped what waited for it (the protocol built it on a
// member list from before the death, or the member is no longer in the
// table at all) is sent and fails at once, as SendReliable fails for a
// member listed down or unknown, or expires while it waits; either way
// the member's queue must be forgotten then. A failed send backs a member
// off, and a backed-off member is otherwise kept until a send to it
// succeeds, which never happens for a dead boot: every restart is a new
// member name, so such members would pile up in the queue (and in the
// backed_off gauge) with every death.
func TestLateSendToDeadMemberForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newIdleCluster(t, "a", 1)
		g := c.gossip
		var sent int
		g.sendFn = func(to string, _ []byte) error { // SendReliable's member check
			c.mu.Lock()
			e, ok := c.members[to]
			c.mu.Unlock()
			switch {
			case !ok:
				return fmt.Errorf("%w: %q", ErrUnknownMember, to)
			case !e.State.Up():
				return fmt.Errorf("%w: %q", ErrMemberDown, to)
			}
			c.mu.Lock()
			sent++
			c.mu.Unlock()
			return nil
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go g.sender(&wg)
		defer func() { g.q.close(); wg.Wait() }() // a failed check too

		list := func(b string, boot uint64, st State) {
			c.mu.Lock()
			c.members[b] = &entry{Member: Member{Name: "b", Member: b, BootID: boot, State: st, Since: time.Now()}}
			c.memberVersion.Add(1)
			c.mu.Unlock()
		}
		const boots = 40
		for boot := range uint64(boots) {
			b := MemberName("b", boot)
			list(b, boot, StateAlive)
			require.Zero(t, g.q.push(Message{To: b, Type: codec.TypeRecords}))
			synctest.Wait()
			list(b, boot, StateDead)
			g.onEvent(Event{Type: EventDead, Member: Member{Name: "b", Member: b, BootID: boot, State: StateDead}})
			if boot%4 == 3 { // pruned from the table by now
				c.mu.Lock()
				delete(c.members, b)
				c.memberVersion.Add(1)
				c.mu.Unlock()
			}
			// Built before the death was handled: sent after the drop. The
			// odd boots' second message expires while the first is sent.
			late := []Message{{To: b, Type: codec.TypeRecords}, {To: b, Type: codec.TypeBatch}}
			if boot%2 == 1 {
				late[1].Expires = time.Now()
			}
			g.send(late)
			synctest.Wait()
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		c.mu.Lock()
		require.Equal(t, boots, sent, "each boot's message sent while it was up")
		c.mu.Unlock()
		require.Zero(t, g.q.len(), "the late messages were sent or expired")
		st := g.stats.snapshot()
		require.Equal(t, uint64(boots/2), st.SendDrops, "the expired messages")
		g.q.mu.Lock()
		peers := len(g.q.peers)
		g.q.mu.Unlock()
		require.Zero(t, peers, "the dead members' queues forgotten")
		require.Zero(t, g.q.backedOff(), "no dead member counted backed off")
	})
}
