//! What the property tests of every encoding share: the Arrow comparison
//! kernel each [`CmpOp`] must equal.

use arrow::array::{BooleanArray, Datum};
use arrow::compute::kernels::cmp;
use arrow::error::ArrowError;
use silt_liquid::CmpOp;

/// An Arrow comparison kernel.
pub type Kernel = fn(&dyn Datum, &dyn Datum) -> Result<BooleanArray, ArrowError>;

/// Every operator with the kernel that defines it.
pub const OPS: [(CmpOp, Kernel); 6] = [
    (CmpOp::Eq, cmp::eq),
    (CmpOp::NotEq, cmp::neq),
    (CmpOp::Lt, cmp::lt),
    (CmpOp::LtEq, cmp::lt_eq),
    (CmpOp::Gt, cmp::gt),
    (CmpOp::GtEq, cmp::gt_eq),
];

use std::collections::HashMap;

use silt_liquid::LiquidArrayRef;
use silt_liquid::persist::{PartCatalog, PartId};

/// The batches of a column as the disk tier keeps them: written with one
/// catalog, their parts stored once, and read back by another (a restart's:
/// it holds nothing in memory, so every part is read from its bytes once).
#[derive(Default)]
pub struct Shelf {
    writer: PartCatalog,
    reader: PartCatalog,
    parts: HashMap<PartId, Vec<u8>>,
}

impl Shelf {
    /// `array` written and read back: the same form, length, type and nulls.
    pub fn round_trip(&mut self, array: &LiquidArrayRef) -> LiquidArrayRef {
        let persisted = self.writer.write(array);
        for (id, bytes) in persisted.new_parts {
            assert!(self.parts.insert(id, bytes).is_none(), "part {id} written twice");
        }
        for id in &persisted.refs {
            assert!(self.parts.contains_key(id), "part {id} referenced but never written");
        }
        let parts = &self.parts;
        let back = self
            .reader
            .read(&persisted.bytes, &|id| parts.get(&id).cloned())
            .expect("a batch just written reads back");
        assert_eq!(back.encoding(), array.encoding());
        assert_eq!(back.data_type(), array.data_type());
        assert_eq!(back.len(), array.len());
        assert_eq!(back.null_count(), array.null_count());
        // Read again while the first read-back holds its parts: from memory.
        let again = self
            .reader
            .read(&persisted.bytes, &|id| panic!("part {id} read again from bytes"))
            .expect("a batch read back reads again");
        assert_eq!(&again.to_arrow(), &back.to_arrow());
        back
    }
}
