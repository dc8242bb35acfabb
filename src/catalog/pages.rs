//! Pages of the aggregated lists: pre-serialized once per catalogue epoch (and, on
//! first use, once per older protocol revision), addressed by opaque cursors
//! sealed with the view's key (MCP server/utilities/pagination).

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::view::View;
use crate::jsonrpc::RawJson;
use crate::mcp::ListKind;
use crate::mcp::ProtocolVersion;
use crate::mcp::version::{complete_raw_for_modern, downgrade_item};

impl View {
    pub(super) fn paginate(
        &self,
        kind: ListKind,
        items: &[Value],
        page_size: usize,
    ) -> Vec<Box<RawValue>> {
        let chunks: Vec<&[Value]> = if items.is_empty() {
            vec![&[]]
        } else {
            items.chunks(page_size).collect()
        };
        let count = chunks.len();
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut page = Map::new();
                page.insert(kind.key().into(), Value::Array(chunk.to_vec()));
                if i + 1 < count {
                    page.insert("nextCursor".into(), self.cursor(kind, i + 1).into());
                }
                serde_json::value::to_raw_value(&page).unwrap_or_else(|_| empty_page())
            })
            .collect()
    }

    /// The page a host asked for: the first without a cursor, else the one its
    /// cursor names. `None` for a cursor that is malformed, forged, of another
    /// list, or from an older epoch (→ `-32602`, MCP server/utilities/pagination).
    pub fn page(
        &self,
        kind: ListKind,
        cursor: Option<&str>,
        host: ProtocolVersion,
    ) -> Option<&RawValue> {
        let pages = match host {
            ProtocolVersion::V2026_07_28 => &self.modern_pages()[kind as usize],
            ProtocolVersion::V2025_11_25 => &self.pages[kind as usize],
            ProtocolVersion::V2025_06_18 => &self.older_pages(0, host)[kind as usize],
            _ => &self.older_pages(1, host)[kind as usize],
        };
        let index = match cursor {
            None => 0,
            Some(c) => self.open_cursor(kind, c)?,
        };
        pages.get(index).map(|p| &**p)
    }

    /// The pages as complete results for 2026-07-28 hosts (`resultType`, cache
    /// hints, `serverInfo`), built on first use.
    fn modern_pages(&self) -> &[Vec<Box<RawValue>>; 4] {
        self.modern.get_or_init(|| {
            let mut out: [Vec<Box<RawValue>>; 4] = Default::default();
            for (i, pages) in self.pages.iter().enumerate() {
                out[i] = pages
                    .iter()
                    .map(|p| {
                        let done = complete_raw_for_modern(RawJson::from_raw(p.clone()), true);
                        RawValue::from_string(done.get().to_owned()).unwrap_or_else(|_| p.clone())
                    })
                    .collect();
            }
            out
        })
    }

    /// The pages with fields the host's revision does not know removed.
    fn older_pages(&self, slot: usize, host: ProtocolVersion) -> &[Vec<Box<RawValue>>; 4] {
        self.older[slot].get_or_init(|| {
            let mut out: [Vec<Box<RawValue>>; 4] = Default::default();
            for (i, kind) in ListKind::ALL.into_iter().enumerate() {
                out[i] = self.pages[i]
                    .iter()
                    .map(|p| {
                        let Ok(mut v) = serde_json::from_str::<Value>(p.get()) else {
                            return p.clone();
                        };
                        if let Some(items) = v.get_mut(kind.key()).and_then(Value::as_array_mut) {
                            for item in items {
                                downgrade_item(item, host);
                            }
                        }
                        serde_json::value::to_raw_value(&v).unwrap_or_else(|_| p.clone())
                    })
                    .collect();
            }
            out
        })
    }

    fn cursor(&self, kind: ListKind, page: usize) -> String {
        self.key.seal(self.epoch, kind as u8, page as u32)
    }

    fn open_cursor(&self, kind: ListKind, cursor: &str) -> Option<usize> {
        let (epoch, list, page) = self.key.open(cursor)?;
        (epoch == self.epoch && list == kind as u8).then_some(page as usize)
    }
}

/// The epoch of a view: the first 8 bytes of SHA-256 over the page size and
/// every list's serialized items, so identical lists give identical epochs in
/// every process (and across restarts), and any change to what is listed gives
/// another. Computed once per build, never per request.
pub(super) fn digest(lists: &[Vec<Value>; 4], page_size: usize) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update((page_size as u64).to_be_bytes());
    for (kind, items) in lists.iter().enumerate() {
        h.update([kind as u8]);
        h.update((items.len() as u64).to_be_bytes());
        for item in items {
            let bytes = serde_json::to_vec(item).unwrap_or_default();
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(&bytes);
        }
    }
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

fn empty_page() -> Box<RawValue> {
    RawValue::from_string("{}".into()).unwrap_or_else(|_| Box::<RawValue>::default())
}
