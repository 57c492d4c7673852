//! The `shard_*` metrics of the members of a shard group ([`crate::shard`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::FloatGauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandoverLabels {
    group: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    group: String,
    kind: String,
    key: &'static str,
}

/// How a sharded cache tells its size at a scrape.
type Counted = Box<dyn Fn() -> Option<usize> + Send + Sync>;

/// The series a shard member records into.
#[derive(Clone)]
pub(crate) struct ShardSeries {
    members: Family<GroupLabels, Gauge>,
    share: Family<GroupLabels, FloatGauge>,
    handovers: Family<HandoverLabels, Counter>,
    objects: Arc<Mutex<Vec<(ObjectLabels, Counted)>>>,
}

impl ShardSeries {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let series = ShardSeries {
            members: Family::default(),
            share: Family::default(),
            handovers: Family::default(),
            objects: Arc::default(),
        };
        registry.register(
            "shard_members",
            "Live members of the shard group, this replica included, as it last read them",
            series.members.clone(),
        );
        registry.register(
            "shard_active_share",
            "Share of the hash space (so of the objects, on average) this replica works on, 0 to 1",
            series.share.clone(),
        );
        registry.register(
            "shard_handovers",
            "Ranges this replica started (acquired) or finished giving up (released)",
            series.handovers.clone(),
        );
        registry.register_collector(Box::new(ObjectsCollector(series.objects.clone())));
        series
    }

    pub(crate) fn set_members(&self, group: &str, members: usize) {
        let labels = GroupLabels {
            group: group.to_string(),
        };
        let members = i64::try_from(members).unwrap_or(i64::MAX);
        self.members.get_or_create(&labels).set(members);
    }

    pub(crate) fn set_share(&self, group: &str, share: f64) {
        let labels = GroupLabels {
            group: group.to_string(),
        };
        self.share.get_or_create(&labels).set(share);
    }

    pub(crate) fn handover(&self, group: &str, direction: &'static str) {
        let labels = HandoverLabels {
            group: group.to_string(),
            direction,
        };
        self.handovers.get_or_create(&labels).inc();
    }

    /// Reports `shard_objects{group,kind,key}` from `count` at each scrape, until it returns `None`
    /// (its cache is gone).
    pub(crate) fn count_objects(
        &self,
        group: &str,
        kind: &str,
        key: &'static str,
        count: impl Fn() -> Option<usize> + Send + Sync + 'static,
    ) {
        let labels = ObjectLabels {
            group: group.to_string(),
            kind: kind.to_string(),
            key,
        };
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.push((labels, Box::new(count)));
    }
}

struct ObjectsCollector(Arc<Mutex<Vec<(ObjectLabels, Counted)>>>);

impl fmt::Debug for ObjectsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ObjectsCollector")
    }
}

impl Collector for ObjectsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut objects = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = Vec::new();
        objects.retain(|(labels, count)| match count() {
            Some(count) => {
                counts.push((labels.clone(), count));
                true
            }
            None => false,
        });
        drop(objects);
        if counts.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "shard_objects",
            "Objects a sharded cache holds: those of the ranges this replica works on",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (labels, count) in counts {
            let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
            gauge.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
