//! Records handed to librdkafka and not yet settled, settled strictly in send order.
//!
//! Delivery reports of different partitions can arrive in any order, but a sink's acks must
//! come in sequence order (one cursor per sink). [`InFlight::next`] therefore waits for the
//! oldest record's report only; later reports that already arrived are taken after it.

use std::collections::VecDeque;
use std::future::Future;

/// Items in send order, each with the future of its delivery report.
pub struct InFlight<T, F> {
    items: VecDeque<(T, F)>,
}

impl<T, F: Future + Unpin> InFlight<T, F> {
    pub fn new() -> Self {
        InFlight {
            items: VecDeque::new(),
        }
    }

    pub fn push(&mut self, item: T, report: F) {
        self.items.push_back((item, report));
    }

    /// Puts `item` back in front, to be settled before everything sent after it (a record
    /// sent again after Kafka refused it).
    pub fn push_front(&mut self, item: T, report: F) {
        self.items.push_front((item, report));
    }

    /// The oldest item, if any.
    pub fn front(&self) -> Option<&T> {
        self.items.front().map(|(item, _)| item)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The oldest item and its report, once that report is in; never completes while empty.
    /// Cancel-safe: the item is removed only in the poll that returns it.
    pub async fn next(&mut self) -> (T, F::Output) {
        let Some((_, report)) = self.items.front_mut() else {
            return std::future::pending().await;
        };
        let out = report.await;
        match self.items.pop_front() {
            Some((item, _)) => (item, out),
            // The front was there a moment ago and nothing else touches `items` meanwhile
            // (this method holds `&mut self`).
            None => unreachable!("the front item vanished while its report was awaited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn reports_are_settled_in_send_order_even_when_later_ones_arrive_first() {
        let mut inflight = InFlight::new();
        let mut senders = Vec::new();
        for seq in 1..=3u64 {
            let (tx, rx) = oneshot::channel::<&str>();
            inflight.push(seq, rx);
            senders.push(tx);
        }
        let mut senders = senders.into_iter();
        let (s1, s2, s3) = (senders.next().unwrap(), senders.next().unwrap(), senders.next().unwrap());
        s3.send("third").unwrap();
        s2.send("second").unwrap();
        {
            let next = inflight.next();
            tokio::pin!(next);
            assert!(
                futures::poll!(next.as_mut()).is_pending(),
                "the oldest record is not settled yet, so nothing is"
            );
        }
        assert_eq!(inflight.len(), 3, "a pending next() removed nothing");
        s1.send("first").unwrap();
        let order: Vec<(u64, &str)> = vec![
            {
                let (seq, r) = inflight.next().await;
                (seq, r.unwrap())
            },
            {
                let (seq, r) = inflight.next().await;
                (seq, r.unwrap())
            },
            {
                let (seq, r) = inflight.next().await;
                (seq, r.unwrap())
            },
        ];
        assert_eq!(order, vec![(1, "first"), (2, "second"), (3, "third")]);
        assert!(inflight.is_empty());
    }

    #[tokio::test]
    async fn an_empty_queue_never_settles() {
        let mut inflight: InFlight<u64, oneshot::Receiver<()>> = InFlight::new();
        let next = inflight.next();
        tokio::pin!(next);
        assert!(futures::poll!(next.as_mut()).is_pending());
    }
}
