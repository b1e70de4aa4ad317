//! The metrics the backup records, named in one place (the broker describes them with the rest).

pub const BACKUP_WRITTEN_BYTES: &str = "tailstream_backup_written_bytes_total";
pub const BACKUP_BUFFERS_USED: &str = "tailstream_backup_buffers_used";
pub const BACKUP_BUFFERS_FREE: &str = "tailstream_backup_buffers_free";
pub const BACKUP_BUFFER_BYTES_USED: &str = "tailstream_backup_buffer_bytes_used";
pub const BACKUP_CLAIMS_REJECTED: &str = "tailstream_backup_claims_rejected_total";
pub const BACKUP_BUFFERS_MADE_ON_OPEN: &str = "tailstream_backup_buffers_made_on_open_total";
pub const BACKUP_SPARE_BUFFERS_MADE: &str = "tailstream_backup_spare_buffers_made_total";
