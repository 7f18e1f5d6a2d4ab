//! A doubly linked list whose nodes live in a `Vec`, addressed by index.
//!
//! LRU and SIEVE both need a queue that can unlink any node in O(1) (a hit
//! moves a node; a removal unlinks one) and, for SIEVE, walk from a node
//! toward the newer end. `std::collections::LinkedList` cannot unlink by
//! handle, and a pointer-based list needs `unsafe`; indices into a slab give
//! the same O(1) operations safely, and freed slots are reused so the slab
//! stays as large as the most entries ever held at once.

/// Index of a node in a [`SlabList`], valid until that node is removed.
pub(crate) type NodeId = usize;

const NIL: usize = usize::MAX;

struct Node<T> {
    /// `None` while the slot is on the free list.
    value: Option<T>,
    /// Toward the front (newer end); `NIL` at the front.
    newer: usize,
    /// Toward the back (older end); `NIL` at the back.
    older: usize,
}

/// The list. The front is the newest end, the back the oldest.
pub(crate) struct SlabList<T> {
    nodes: Vec<Node<T>>,
    free: Vec<usize>,
    front: usize,
    back: usize,
    len: usize,
}

impl<T> SlabList<T> {
    pub(crate) fn new() -> Self {
        SlabList {
            nodes: Vec::new(),
            free: Vec::new(),
            front: NIL,
            back: NIL,
            len: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `value` at the front and returns its id.
    pub(crate) fn push_front(&mut self, value: T) -> NodeId {
        let node = Node {
            value: Some(value),
            newer: NIL,
            older: NIL,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.link_front(id);
        self.len += 1;
        id
    }

    /// Unlinks node `id` and returns its value; the id may then be reused.
    pub(crate) fn remove(&mut self, id: NodeId) -> T {
        self.unlink(id);
        self.len -= 1;
        self.free.push(id);
        self.nodes[id].value.take().expect("removing a live node")
    }

    /// Moves node `id` to the front.
    pub(crate) fn move_to_front(&mut self, id: NodeId) {
        if self.front != id {
            self.unlink(id);
            self.link_front(id);
        }
    }

    /// The oldest node.
    pub(crate) fn back(&self) -> Option<NodeId> {
        (self.back != NIL).then_some(self.back)
    }

    /// The node just newer than `id` (one step toward the front).
    pub(crate) fn newer(&self, id: NodeId) -> Option<NodeId> {
        let n = self.nodes[id].newer;
        (n != NIL).then_some(n)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, id: NodeId) -> &T {
        self.nodes[id].value.as_ref().expect("reading a live node")
    }

    pub(crate) fn get_mut(&mut self, id: NodeId) -> &mut T {
        self.nodes[id].value.as_mut().expect("reading a live node")
    }

    fn link_front(&mut self, id: usize) {
        self.nodes[id].newer = NIL;
        self.nodes[id].older = self.front;
        if self.front != NIL {
            self.nodes[self.front].newer = id;
        } else {
            self.back = id;
        }
        self.front = id;
    }

    fn unlink(&mut self, id: usize) {
        let Node { newer, older, .. } = self.nodes[id];
        if newer != NIL {
            self.nodes[newer].older = older;
        } else {
            self.front = older;
        }
        if older != NIL {
            self.nodes[older].newer = newer;
        } else {
            self.back = newer;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_back(list: &SlabList<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cur = list.back();
        while let Some(id) = cur {
            out.push(*list.get(id));
            cur = list.newer(id);
        }
        out
    }

    #[test]
    fn push_move_remove_keep_links_consistent() {
        let mut list = SlabList::new();
        let a = list.push_front(1);
        let b = list.push_front(2);
        let c = list.push_front(3);
        assert_eq!(from_back(&list), [1, 2, 3]);
        list.move_to_front(a);
        assert_eq!(from_back(&list), [2, 3, 1]);
        assert_eq!(list.remove(c), 3);
        assert_eq!(from_back(&list), [2, 1]);
        assert_eq!(list.remove(b), 2);
        assert_eq!(list.remove(a), 1);
        assert_eq!((list.len(), list.back()), (0, None));
    }

    #[test]
    fn freed_slots_are_reused() {
        let mut list = SlabList::new();
        let a = list.push_front(1);
        list.remove(a);
        let b = list.push_front(2);
        assert_eq!(a, b);
        assert_eq!(list.nodes.len(), 1);
        assert_eq!(from_back(&list), [2]);
    }
}
