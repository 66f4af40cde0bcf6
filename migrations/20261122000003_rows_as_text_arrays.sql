-- Rows are stored as text arrays in the dataset's column order instead of jsonb objects:
-- PostgreSQL takes them in about twice as fast (no JSON to parse, no key names repeated in
-- every row), and the column names live once, in `datasets.columns`. Values are the canonical
-- texts the import writes (`42`, `12.50`, `true`, `2024-12-31`, RFC 3339 timestamps).
alter table dataset_rows add column cells text[];

update dataset_rows r
set cells = (
    select coalesce(array_agg(r.data ->> (c.col ->> 'name') order by c.i), '{}')
    from datasets d, jsonb_array_elements(d.columns) with ordinality as c (col, i)
    where d.id = r.dataset_id
);

-- Keys were JSON texts (`"abc"`, `42`); now they are the value's text.
update dataset_rows set key = key::jsonb #>> '{}' where key is not null;

alter table dataset_rows alter column cells set not null;
alter table dataset_rows drop column data;
