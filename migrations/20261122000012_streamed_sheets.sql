-- A workbook's sheet now streams from the converter straight into chunks, which are recorded
-- as they are written: no converted CSV is stored, and the header row lives in `row_format`.
alter table jobs drop column data_upload_id, drop column header_row;
