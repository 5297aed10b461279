package cluster

// The inbox: membership events and user messages wait in bounded queues
// between memberlist's callbacks, which must not block, and the handlers,
// which run on the cluster's own goroutines.

// deliverEvents hands queued membership events to deliver until Close has
// shut memberlist down, then drains what is left.
func (c *Cluster) deliverEvents() {
	defer c.wg.Done()
	for {
		select {
		case ev := <-c.events:
			c.deliver(ev)
		case <-c.drained:
			// memberlist may still call back from a goroutine that outlives
			// its Shutdown; those late events fill the queue and are dropped.
			for {
				select {
				case ev := <-c.events:
					c.deliver(ev)
				default:
					return
				}
			}
		}
	}
}

// deliver hands one membership event to the gossip shell, then OnEvent.
func (c *Cluster) deliver(ev Event) {
	c.log.Debug("cluster: member "+ev.Type.String(), "peer", ev.Member.Member, "addr", ev.Member.Addr)
	if c.gossip != nil {
		c.gossip.onEvent(ev)
	}
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(ev)
	}
}

// deliverMessages hands queued messages to onMessage until Close; then it
// discards and counts what is still queued. A message that arrives once
// Close began is delivered only if delivery has not ended yet.
func (c *Cluster) deliverMessages() {
	defer c.wg.Done()
	for {
		select { // Close first: a ready message must not win the race against it
		case <-c.stop:
			c.endDelivery()
			return
		default:
		}
		select {
		case <-c.stop:
			c.endDelivery()
			return
		case msg := <-c.msgs:
			c.onMessage(msg)
		}
	}
}

// endDelivery discards the queued messages and counts them; NotifyMsg
// counts later ones the same way.
func (c *Cluster) endDelivery() {
	c.msgMu.Lock()
	defer c.msgMu.Unlock()
	c.msgsEnd = true
	for {
		select {
		case <-c.msgs:
			c.stats.msgsDiscarded.Add(1)
		default:
			return
		}
	}
}

// enqueueMessage copies buf (memberlist reuses it) and queues it for
// delivery; it never blocks (msgMu is held only around non-blocking queue
// operations). It runs inside memberlist's NotifyMsg.
func (c *Cluster) enqueueMessage(buf []byte) {
	switch {
	case len(buf) > c.cfg.Limits.MaxMessageBytes:
		c.stats.msgsTooLarge.Add(1)
		return
	case c.onMessage == nil:
		c.stats.msgsDropped.Add(1)
		return
	}
	c.msgMu.Lock()
	defer c.msgMu.Unlock()
	if c.msgsEnd {
		// Queued and discarded at once, as if it had arrived just before:
		// MessagesReceived stays the delivered plus the discarded.
		c.stats.msgsIn.Add(1)
		c.stats.msgsDiscarded.Add(1)
		return
	}
	select {
	case c.msgs <- append([]byte(nil), buf...):
		c.stats.msgsIn.Add(1)
	default:
		c.stats.msgsDropped.Add(1)
	}
}
