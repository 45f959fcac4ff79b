//! What Kafka refused kubecast, named as an ACL: the operation, the resource and its name
//! (`Write` on Topic `kubecast.pods`), so that a missing permission reads as the
//! `kafka-acls.sh` line that grants it. Entry points: [`Refusal`], [`refused`].

use rdkafka::error::RDKafkaErrorCode;

/// A Kafka resource kubecast needs a permission on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Topic,
    TransactionalId,
    Group,
    Cluster,
}

impl Resource {
    /// The name `kafka-acls.sh` and Kafka's errors use.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Topic => "Topic",
            Resource::TransactionalId => "TransactionalId",
            Resource::Group => "Group",
            Resource::Cluster => "Cluster",
        }
    }
}

/// An operation of an ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Write,
    Read,
    Create,
    Describe,
    IdempotentWrite,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Write => "Write",
            Operation::Read => "Read",
            Operation::Create => "Create",
            Operation::Describe => "Describe",
            Operation::IdempotentWrite => "IdempotentWrite",
        }
    }
}

/// Kafka refused `operation` on `resource` `name`, answering `code`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Kafka refused {} on {} `{name}` ({code}){hint}", operation.name(), resource.name())]
pub struct Refusal {
    pub operation: Operation,
    pub resource: Resource,
    pub name: String,
    /// Kafka's answer, as librdkafka words it.
    pub code: String,
    /// What to do about it (starts with `: ` when there is something to say).
    pub hint: String,
}

impl Refusal {
    /// A refusal Kafka answered `code`. A topic that does not exist (any more) is named as
    /// such, in the same words whichever code said it (a hold logs a reason once, until it
    /// changes).
    pub fn new(
        operation: Operation,
        resource: Resource,
        name: &str,
        code: RDKafkaErrorCode,
    ) -> Refusal {
        let (code, hint) = if missing(code) {
            (
                "the topic does not exist".to_string(),
                "; create it, or set the sink's `create_topics` for kubecast to create it"
                    .to_string(),
            )
        } else {
            (
                code.to_string(),
                "; `kubecast kafka-acls` prints the ACLs this config needs".to_string(),
            )
        };
        Refusal {
            operation,
            resource,
            name: name.to_string(),
            code,
            hint,
        }
    }
}

/// Whether `code` is Kafka refusing a permission (an authorization failure) rather than a
/// fault that passes.
pub fn refused(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            | RDKafkaErrorCode::DelegationTokenAuthorizationFailed
    )
}

/// Whether `code` says the topic is not there (deleted, or never created with auto-creation
/// off), or librdkafka no longer knows its partitions (it sets them to none when the topic's
/// metadata is refused, and then refuses records for it at once).
pub fn missing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownPartition
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_the_acl_that_grants_it() {
        let r = Refusal::new(
            Operation::Write,
            Resource::Topic,
            "kubecast.pods",
            RDKafkaErrorCode::TopicAuthorizationFailed,
        );
        let text = r.to_string();
        assert!(
            text.starts_with("Kafka refused Write on Topic `kubecast.pods` ("),
            "{text}"
        );
        assert!(text.contains("kubecast kafka-acls"), "{text}");
    }

    #[test]
    fn authorization_failures_are_refusals_and_outages_are_not() {
        assert!(refused(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(refused(
            RDKafkaErrorCode::TransactionalIdAuthorizationFailed
        ));
        assert!(!refused(RDKafkaErrorCode::NotEnoughReplicas));
        assert!(!refused(RDKafkaErrorCode::BrokerTransportFailure));
        assert!(missing(RDKafkaErrorCode::UnknownTopicOrPartition));
    }

    #[test]
    fn a_missing_topic_reads_the_same_whichever_code_said_it() {
        let texts: Vec<String> = [
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::UnknownTopic,
            RDKafkaErrorCode::UnknownPartition,
        ]
        .into_iter()
        .map(|c| Refusal::new(Operation::Write, Resource::Topic, "kubecast.pods", c).to_string())
        .collect();
        assert!(texts.iter().all(|t| t == &texts[0]), "{texts:?}");
        assert!(
            texts[0].contains("`kubecast.pods`") && texts[0].contains("does not exist"),
            "{}",
            texts[0]
        );
        assert!(!texts[0].contains("kafka-acls"), "{}", texts[0]);
    }
}
