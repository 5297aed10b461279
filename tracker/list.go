package tracker

// listNode is an element's place in an intrusive doubly linked list: the
// element embeds it and v points back at the element, so a list costs no
// allocation and moving an element is a few pointer writes. The tracker's
// destinations (in order of their last Record) and the fleet's eviction
// candidates (in order of their last insert) are both such lists.
type listNode[V any] struct {
	prev, next *listNode[V]
	v          V
}

// list is a doubly linked list of listNodes, head first. The zero value is
// an empty list.
type list[V any] struct {
	head, tail *listNode[V]
}

// pushFront makes n, which must be in no list, the head.
func (l *list[V]) pushFront(n *listNode[V]) { l.link(n, nil, l.head) }

// pushBack makes n, which must be in no list, the tail.
func (l *list[V]) pushBack(n *listNode[V]) { l.link(n, l.tail, nil) }

// link puts n, which must be in no list, between prev and next: adjacent
// nodes of l, nil standing for either end.
func (l *list[V]) link(n, prev, next *listNode[V]) {
	n.prev, n.next = prev, next
	if prev != nil {
		prev.next = n
	} else {
		l.head = n
	}
	if next != nil {
		next.prev = n
	} else {
		l.tail = n
	}
}

// remove takes n, which must be in l, out of l.
func (l *list[V]) remove(n *listNode[V]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

// moveToFront makes n, which must be in l, the head: remove and
// pushFront in one, for the record path (n, not the head, has a prev, and
// the head is not nil).
func (l *list[V]) moveToFront(n *listNode[V]) {
	if l.head == n {
		return
	}
	n.prev.next = n.next
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, l.head
	l.head.prev = n
	l.head = n
}

// moveToBack makes n, which must be in l, the tail.
func (l *list[V]) moveToBack(n *listNode[V]) {
	if l.tail == n {
		return
	}
	l.remove(n)
	l.pushBack(n)
}
